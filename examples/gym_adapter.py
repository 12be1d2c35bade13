"""Use a navi_nb environment through Gymnasium's vector API.

    python examples/gym_adapter.py        (needs: pip install navi-nb[gym])

One NavEnv with N actors is one Gymnasium VectorEnv with N sub-environments.
Finished actors reset within the same step (autoreset mode SAME_STEP); their
last observation is in info["final_obs"].
"""
import numpy as np

import navi_nb
from navi_nb.env.gym_adapter import NaviVectorEnv

world = navi_nb.compile_scene("box", resolution=64)
envs = NaviVectorEnv(world, 8, sensor=navi_nb.Sensor(16, 4), task="pointgoal", seed=0)
print("single observation space:", envs.single_observation_space.shape,
      "action space:", envs.single_action_space)

obs, info = envs.reset(seed=0)
rng = np.random.default_rng(0)
total, finished = np.zeros(envs.num_envs), 0
for _ in range(200):
    actions = rng.uniform(-1, 1, size=envs.action_space.shape).astype(np.float32)
    obs, reward, terminated, truncated, info = envs.step(actions)
    total += reward
    finished += int(np.sum(terminated | truncated))
print(f"random policy: {finished} episodes finished, mean reward per actor {total.mean():.2f}")
envs.close()
