"""Run by test_learn_same_sum in a subprocess (NUMBA_NUM_THREADS=4 must be set
before Numba loads): short PPO runs at given shard counts; prints one JSON line
per run with the SHA-256 of the weights' and optimizer state's bytes."""

import hashlib
import json
import sys

import numba
import numpy as np

import navi_nb  # noqa: F401  (BLAS pin)
from navi_nb.learn.collect import train
from navi_nb.learn.policy import ActorCritic
from navi_nb.learn.ppo import PPO, PPOConfig
from navi_nb.learn.rollout import RolloutSlab


def make_env(kind, n_actors, seed):
    if kind == "toy":
        from navi_nb.env.toy import PointGoalToy

        return PointGoalToy(n_actors, seed=seed, obs_pad=59)
    from navi_nb.env.nav_env import NavEnv
    from navi_nb.sense.sensor import Sensor
    from navi_nb.world.compiler import compile_scene

    world = compile_scene("box", resolution=32, seed=0)  # "box" and "box-memory"
    return NavEnv(world, n_actors, sensor=Sensor(8, 3), task="pointgoal", seed=seed, max_steps=40, actor_block=4)


def run(kind, shards, chunk, seed=7, updates=3):
    numba.set_num_threads(shards)
    env = make_env(kind, 16, seed)  # four blocks of 4 actors: the block tree is in every run
    memory_size = 16 if kind.endswith("memory") else 0  # the GRU core: its own kernels and sums in every run
    pol = ActorCritic(env.obs_dim, 4, hidden=(32, 32), seed=seed, memory_size=memory_size)
    # tile_min_weights=1024: the 32-wide hidden layers use weight tiles, the
    # output layers chunk slots, so both decompositions are in every run
    cfg = PPOConfig(
        update_epochs=3,
        num_minibatches=4,
        chunk_size=chunk,
        tile_min_weights=1024,
        tile_rows=16,
        tile_cols=16,
        ent_coef=0.01,
        actor_block=4,
    )
    ppo = PPO(pol, cfg, seed=seed)
    slab = RolloutSlab(32, 16, env.obs_dim, 4, memory_size=memory_size)
    rows = train(env, ppo, slab, updates, seed=seed)
    h = hashlib.sha256()
    for arr in (pol.params, ppo.adam.m, ppo.adam.v, np.array(ppo.adam.t, np.int64)):
        h.update(np.ascontiguousarray(arr).tobytes())
    return {
        "kind": kind,
        "shards": shards,
        "threads": numba.get_num_threads(),
        "chunk": chunk,
        "hash": h.hexdigest(),
        "adam_t": ppo.adam.t,
        "modes": sorted(set(ppo.modes.values())),
        "minibatches": sum(r["minibatches"] for r in rows),
    }


if __name__ == "__main__":
    kind = sys.argv[1]
    for spec in sys.argv[2:]:
        shards, chunk = (int(x) for x in spec.split(":"))
        print(json.dumps(run(kind, shards, chunk)), flush=True)
