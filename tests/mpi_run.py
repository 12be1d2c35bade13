"""Run by test_mpi under ``mpiexec -n R``: a short PPO run on the box scene with its 16 actors in 4 blocks
spread over the ranks (one rank: the single-process path, no exchange). Rank 0 prints one JSON line with
the SHA-256 of the weights, Adam's state, the PPO and action generators and the whole environment state
(gathered from every rank).

Arguments: ``THREADS UPDATES [save:K:PATH | load:PATH] [block:B] [actors:N]``: save the whole state after K
updates (then stop), or start from a saved state (written at any rank count); ``block:B`` blocks of B
actors (default 4), ``actors:N`` N actors (default 16), ``memory:H`` a policy with an H-unit GRU memory
(its actors' states gathered into the environment hash), ``map:C`` the episodic map with cells of C metres,
``trunks:skip-map`` a GRU policy whose trunks do not read the map's crop (``map_input`` memory).
The reduction is ``NAVI_NB_REDUCE``'s
(``navi_nb.parallel.ranks.reduce_mode``)."""

import hashlib
import json
import sys

import numba
import numpy as np

import navi_nb  # noqa: F401  (BLAS pin)
from navi_nb.env.nav_env import NavEnv
from navi_nb.learn.collect import RowSlice, action_generator, one_update
from navi_nb.learn.policy import ActorCritic
from navi_nb.learn.ppo import PPO, PPOConfig
from navi_nb.learn.rollout import RolloutSlab
from navi_nb.parallel import ranks
from navi_nb.rng_state import generator_to_array, restore_generator
from navi_nb.sense.sensor import Sensor
from navi_nb.world.compiler import compile_scene

ACTORS, BLOCK, STEPS, SEED = 16, 4, 16, 7


def main():
    threads, updates = int(sys.argv[1]), int(sys.argv[2])
    extra = sys.argv[3:]
    block = int(next((a[6:] for a in extra if a.startswith("block:")), BLOCK))
    actors = int(next((a[7:] for a in extra if a.startswith("actors:")), ACTORS))
    memory_size = int(next((a[7:] for a in extra if a.startswith("memory:")), 0))
    map_cell = float(next((a[4:] for a in extra if a.startswith("map:")), 0.0))  # the episodic map's cell
    mode = next((a for a in extra if a.startswith(("save:", "load:"))), "")
    numba.set_num_threads(threads)
    comm = ranks.world()
    ex = ranks.RankExchange(comm, actors // block)
    world = compile_scene("box", resolution=32, seed=0)
    n_local = ex.local_blocks * block
    env = NavEnv(
        world,
        n_local,
        sensor=Sensor(8, 3),
        task="pointgoal",
        seed=SEED,
        max_steps=20,
        map_cell=map_cell,
        map_crop=6,
        actor_block=block,
        first_block=ex.first_block,
    )
    trunk_obs = env.obs_layout["map"].start if "trunks:skip-map" in extra else None
    pol = ActorCritic(env.obs_dim, 4, hidden=(32, 32), seed=SEED, memory_size=memory_size, trunk_obs=trunk_obs)
    memory = pol.new_memory(n_local)
    cfg = PPOConfig(
        update_epochs=2,
        num_minibatches=2,
        chunk_size=16,
        tile_min_weights=1024,
        tile_rows=16,
        tile_cols=16,
        ent_coef=0.01,
        actor_block=block,
    )
    ppo = PPO(pol, cfg, seed=SEED)
    if ex.size > 1:
        ppo.exchange = ex
    slab = RolloutSlab(STEPS, n_local, env.obs_dim, 4, memory_size=memory_size)
    action_rng = action_generator(SEED)
    rng = action_rng if ex.size == 1 else RowSlice(action_rng, ex.first_block * block, actors)
    obs, _ = env.reset()
    obs = obs.copy()
    done = 0
    if mode.startswith("load:"):
        saved = dict(np.load(mode[5:]))
        ppo.set_state({k[4:]: v for k, v in saved.items() if k.startswith("ppo_")})
        full = {k[4:]: v for k, v in saved.items() if k.startswith("env_")}
        env.set_state(ranks.env_state_part(full, block, ex.first_block, ex.local_blocks))
        restore_generator(action_rng, saved["action_rng"])
        obs = env.get_state()["obs"]
        done = int(saved["updates"])
    stop = int(mode.split(":")[1]) if mode.startswith("save:") else updates
    stats = {}
    for _ in range(done, stop):
        obs, _, stats = one_update(env, ppo, slab, obs, rng, num_updates=updates, memory=memory)
    env_state = ranks.gather_env_state(comm, env.get_state())
    if memory is not None:
        env_state.update({"memory_" + k: v for k, v in ranks.gather_env_state(comm, memory.get_state()).items()})
    if mode.startswith("save:"):
        if ex.rank == 0:
            arrays = {"ppo_" + k: v for k, v in ppo.get_state().items()}
            arrays.update({"env_" + k: np.asarray(v) for k, v in env_state.items()})
            np.savez(mode.split(":", 2)[2], action_rng=generator_to_array(action_rng), updates=stop, **arrays)
        return
    h = hashlib.sha256()
    for arr in (
        pol.params,
        ppo.adam.m,
        ppo.adam.v,
        np.array(ppo.adam.t, np.int64),
        generator_to_array(ppo.rng),
        generator_to_array(action_rng),
    ):
        h.update(np.ascontiguousarray(arr).tobytes())
    h_env = hashlib.sha256()
    for name in sorted(env_state):
        h_env.update(name.encode())
        h_env.update(np.ascontiguousarray(env_state[name]).tobytes())
    # every rank must hold the same weights
    same = comm.allgather(hashlib.sha256(pol.params.tobytes()).hexdigest())
    if ex.rank == 0:
        print(
            json.dumps(
                {
                    "ranks": ex.size,
                    "reduce": ex.mode,
                    "threads": numba.get_num_threads(),
                    "learner": h.hexdigest(),
                    "env": h_env.hexdigest(),
                    "ranks_agree": len(set(same)) == 1,
                    "episodes": int(env_state["episodes"].sum()),
                    "adam_t": ppo.adam.t,
                    "stats": {k: v for k, v in stats.items() if isinstance(v, float)},
                    "bytes_sent": ex.bytes_sent,
                    "exchange_s": ex.seconds,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
