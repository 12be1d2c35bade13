"""Train Stable-Baselines3's PPO on navi_nb's `house` and evaluate it as `navi-nb eval` does.

    python examples/sb3_ppo_house.py                   (needs the sb3 extra: pip install -e ".[sb3]")
    python examples/sb3_ppo_house.py --steps 200000    (shorter)

The setting is `navi-nb train`'s default (point-goal in `house`, 64 actors,
64 x 16 rays, 64 steps per actor per update, 1,000,000 actor-steps), and SB3's
PPO gets navi_nb's hyper-parameters (MlpPolicy with separate 2 x 128 tanh
actor and critic, 4 epochs of 4 minibatches, lr 3e-4 annealed to 0, ...:
navi_nb.env.sb3_adapter.ppo_kwargs). One NavEnv steps all actors as one SB3
VecEnv (NaviSB3VecEnv). The evaluation is navi_nb's own
(navi_nb.train.evaluate.evaluate_policy): the same episodes `navi-nb eval`
runs for a navi_nb run of this config (one per actor, seed + 1,000,003, mean
actions), so the success rate and SPL compare directly with `navi-nb eval`'s.

Threads: navi_nb's kernels and PyTorch share the cores. The environment gets
`--threads` (default half the allowed cores) and PyTorch the rest.
"""

import argparse
import time

import torch
from stable_baselines3 import PPO

from navi_nb.env.sb3_adapter import NaviSB3VecEnv, ppo_kwargs
from navi_nb.threads import thread_limit
from navi_nb.train.config import TrainConfig
from navi_nb.train.evaluate import evaluate_policy
from navi_nb.train.runs import load_scene_set, make_env, resolve_scenes

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("--steps", type=int, default=1_000_000, help="actor-steps to train (default 1,000,000)")
p.add_argument("--actors", type=int, default=64, help="actors (default 64)")
p.add_argument("--sensor-az", type=int, default=64, help="sensor azimuth bins (default 64)")
p.add_argument("--sensor-el", type=int, default=16, help="sensor elevation rows (default 16)")
p.add_argument("--resolution", type=int, default=128, help="house resolution (default 128)")
p.add_argument("--episodes", type=int, default=100, help="evaluation episodes (default 100)")
p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
p.add_argument("--threads", type=int, default=max(1, thread_limit() // 2), help="navi_nb threads")
args = p.parse_args()

cfg = TrainConfig(
    scenes="house",
    resolution=args.resolution,
    actors=args.actors,
    sensor_az=args.sensor_az,
    sensor_el=args.sensor_el,
    total_steps=args.steps,
    seed=args.seed,
).validate()
torch.set_num_threads(max(1, thread_limit() - args.threads))
world_set = load_scene_set(resolve_scenes(cfg.scenes, cfg), cfg.resolution)
venv = NaviSB3VecEnv(env=make_env(world_set, cfg), threads=args.threads)  # the trainer's env for this config
model = PPO("MlpPolicy", venv, seed=cfg.seed, device="cpu", **ppo_kwargs(cfg))
print(f"training SB3 PPO: {cfg.num_updates} updates of {cfg.batch_size} actor-steps")
t0 = time.perf_counter()
model.learn(total_timesteps=cfg.num_updates * cfg.batch_size)
wall = time.perf_counter() - t0
print(f"trained {model.num_timesteps:,} actor-steps in {wall:.1f} s ({model.num_timesteps / wall:,.0f} actor-steps/s)")

res = evaluate_policy(lambda obs: model.predict(obs, deterministic=True)[0], world_set, cfg, args.episodes)
(slo, shi), (plo, phi) = res["success_rate_ci95"], res["spl_mean_ci95"]
print(
    f"evaluation ({res['episodes']} episodes, seed {res['seed']}): success {res['success_rate']:.1%} "
    f"({slo:.0%}-{shi:.0%}), SPL {res['spl_mean']:.2f} ({plo:.2f}-{phi:.2f}), mean length {res['length_mean']:.1f}"
)
