"""Use a navi_nb environment through Gymnasium: registered ids, the vector and the single form.

    python examples/gym_adapter.py        (needs the gym extra: pip install -e ".[gym]")

One NavEnv with N actors is one Gymnasium VectorEnv with N sub-environments
(gym.make_vec); gym.make gives one actor as a gymnasium.Env. Finished actors
reset within the same step (autoreset mode SAME_STEP): their last observation
is in info["final_obs"], navi_nb's episode record in info["navi"], and
Gymnasium's RecordEpisodeStatistics adds info["episode"] as for any VectorEnv.
threads= keeps navi_nb's share of the cores when a trainer runs alongside
(navi_nb.set_threads or NAVI_NB_THREADS set it for the whole process).
"""

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env
from gymnasium.wrappers.vector import RecordEpisodeStatistics

import navi_nb
import navi_nb.env.gym_adapter  # (registers navi_nb/PointNav-v0 and navi_nb/Explore-v0)

world = navi_nb.compile_scene("box", resolution=64)
sensor = navi_nb.Sensor(16, 4)

envs = gym.make_vec("navi_nb/PointNav-v0", num_envs=8, world=world, sensor=sensor, seed=0, max_steps=60, threads=1)
envs = RecordEpisodeStatistics(envs)
print("single observation space:", envs.single_observation_space.shape, "action space:", envs.single_action_space)

obs, info = envs.reset(seed=0)
rng = np.random.default_rng(0)
returns, reached = [], 0
for _ in range(200):
    actions = rng.uniform(-1, 1, size=envs.action_space.shape).astype(np.float32)
    obs, reward, terminated, truncated, info = envs.step(actions)
    if "episode" in info:
        returns += info["episode"]["r"][info["_episode"]].tolist()
        reached += int(info["navi"]["success"][info["_navi"]].sum())
print(
    f"random policy: {len(returns)} episodes finished ({reached} reached the goal), mean return {np.mean(returns):.2f}"
)
envs.close()

env = gym.make("navi_nb/PointNav-v0", world=world, sensor=sensor, max_steps=50)
check_env(env.unwrapped, skip_render_check=True)
obs, info = env.reset(seed=1)
steps, done = 0, False
while not done:
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    steps, done = steps + 1, terminated or truncated
print(f"single actor: check_env passed; an episode of {steps} steps, success {info['navi']['success']}")
env.close()
