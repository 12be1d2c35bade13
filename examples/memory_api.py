"""A policy with memory through the Python API: train briefly on `box` with a GRU core, then load the
run's policy and step it by hand, keeping each actor's state and resetting it when an episode ends.

    python examples/memory_api.py [RUN_DIR] [TOTAL_STEPS]

`memory_size` is the `--memory-size` flag of `navi-nb train`; 0 is the MLP without memory.
"""

import sys

import numpy as np

from navi_nb.train.config import TrainConfig
from navi_nb.train.evaluate import load_run_policy
from navi_nb.train.loop import Trainer
from navi_nb.train.runs import make_env

run_dir = sys.argv[1] if len(sys.argv) > 1 else "runs/memory-box"
total = int(sys.argv[2]) if len(sys.argv) > 2 else 16 * 32 * 4

cfg = TrainConfig(
    scenes="box",
    resolution=64,
    actors=16,
    sensor_az=16,
    sensor_el=4,
    rollout_steps=32,
    total_steps=total,
    hidden=[64, 64],
    memory_size=32,
    eval_episodes=0,
    seed=1,
)
trainer = Trainer.create(cfg, run_path=run_dir)
trainer.train(progress=False)

# Reading a run's policy needs its config and weights only (no trainer).
policy, info = load_run_policy(run_dir, cfg)
print(f"policy with a memory of {policy.memory_size} units from {info['source']}")
env = make_env(trainer.world_set, cfg)
obs, _ = env.reset(seed=7)
memory = policy.new_memory(env.n_actors)  # every actor starts an episode: its state is zero
rng = np.random.default_rng(0)
ended = 0
for _ in range(200):
    actions, _logp, _value = policy.act(obs, rng, deterministic=True, memory=memory)  # advances the memory
    obs, _reward, _terminated, _truncated, step_info = env.step(actions)
    memory.start[:] = step_info["done"]  # a finished actor's next observation starts a new episode
    ended += int(np.sum(step_info["done"]))
print(f"{ended} episodes ended in 200 steps of {env.n_actors} actors; state norm {np.linalg.norm(memory.h):.3f}")
