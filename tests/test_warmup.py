"""navi_nb.train.warmup (a cold cache's kernels compiled in child processes) and
navi_nb.bench.peers (benchmark peers in child processes).

Each warm-up test runs in a subprocess with its own empty NUMBA_CACHE_DIR, so
it sees a truly cold cache and leaves the package's cache alone."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from navi_nb.bench import peers
from navi_nb.bench.ppo import net_flops

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(script, cache_dir, timeout=1200, **extra_env):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir), PYTHONPATH=ROOT, **extra_env)
    env.pop("NAVI_NB_WARMUP", None)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_cold_groups_follow_the_numba_cache(tmp_path):
    """A group is cold until Numba has cached a kernel of each of its files (here: the GAE kernel only)."""
    out = _run(
        """
        import json
        import numpy as np
        from navi_nb.train import warmup
        from navi_nb.train.config import TrainConfig
        from navi_nb.learn.gae import compute_gae
        before = warmup.cold_groups(TrainConfig())
        cuda = warmup.cold_groups(TrainConfig(backend="cuda"))
        T, A = 4, 3
        z = np.zeros((T, A), np.float32)
        compute_gae(z + 1, z, np.zeros((T, A), bool), np.zeros((T, A), bool), z, np.zeros(A, np.float32))
        from navi_nb.jit_cache import cold_sources
        print(json.dumps({"before": before, "cuda": cuda,
                          "cold": cold_sources(["navi_nb.learn.gae", "navi_nb.learn.fused"]),
                          "after": warmup.cold_groups(TrainConfig())}))
    """,
        tmp_path / "numba",
    )
    assert out["before"] == ["env", "tracer", "learn"]
    assert out["cuda"] == ["env", "learn"]  # the tracer group compiles the CPU kernel only
    assert out["cold"] == ["navi_nb.learn.fused"]
    assert out["after"] == ["env", "tracer", "learn"]  # one file of a group cached is not the group


@pytest.mark.slow
@pytest.mark.parametrize("memory_size", [0, 8])
def test_learn_warmup_leaves_the_trainer_nothing_to_compile(tmp_path, memory_size):
    """After the learn group's child (and its helper, which compiles the update's second pass) ran, this
    process's policy, GAE, shard calibration and PPO update (the trainer's calls, with the run's sizes) load
    every learning kernel from the cache: no compilation. With memory too (the GRU's kernels)."""
    out = _run(
        """
        MEMORY = MEMORY_SIZE
        import json
        from numba.core import event
        from navi_nb.train import warmup
        from navi_nb.train.config import TrainConfig
        cfg = TrainConfig(actors=8, rollout_steps=16, sensor_az=8, sensor_el=4, hidden=[16, 16],
                          num_minibatches=2, update_epochs=2, total_steps=1024, memory_size=MEMORY)
        warmup.GROUPS = {"learn": warmup.GROUPS["learn"]}  # this test's group only
        w = warmup.start(cfg)
        groups = w.groups
        report = w.wait()
        compiled = []

        class Listener(event.Listener):
            def on_start(self, ev):
                compiled.append(ev.data["dispatcher"].py_func.__module__)

            def on_end(self, ev):
                pass

        event.register("numba:compile", Listener())
        from navi_nb.learn.collect import action_generator, one_update
        from navi_nb.learn.ppo import PPO, PPOConfig
        from navi_nb.learn.rollout import RolloutSlab
        from navi_nb.env.toy import PointGoalToy
        from navi_nb.parallel.shards import UpdateShape, choose_shards
        from navi_nb.train.runs import make_policy
        env = PointGoalToy(cfg.actors, seed=3, obs_pad=8 * 4 + 4 + 3 + 4 - 5, max_steps=5)
        policy = make_policy(cfg, env.obs_dim, 4)
        ppo = PPO(policy, PPOConfig.of(cfg), seed=1)
        slab = RolloutSlab(cfg.rollout_steps, cfg.actors, env.obs_dim, 4, memory_size=MEMORY)
        obs, _ = env.reset(seed=3)
        memory = policy.new_memory(cfg.actors)
        obs, _, stats = one_update(env, ppo, slab, obs, action_generator(3), num_updates=cfg.num_updates,
                                   memory=memory)
        choose_shards(None, ppo, slab, tick=lambda: None, shape=UpdateShape(1, 4, 2, cfg.minibatch_size), budget_s=0.2)
        from navi_nb.learn import fused, minibatch
        # the helper's and the child's passes were compiled for the types the update's chain gives them:
        # the cache holds one signature of each (a mismatch would have compiled the chain's own as well)
        passes = [len(k._cache._cache_file._load_index()) for k in (fused._chunk_pass, minibatch._finish_pass)]
        print(json.dumps({"groups": groups, "report": report, "cold_after": warmup.cold_groups(cfg),
                          "learn_compiled": sorted(set(m for m in compiled if m.startswith("navi_nb.learn"))),
                          "grad_norm": float(stats["grad_norm"]), "pass_signatures": passes}))
    """.replace("MEMORY_SIZE", str(memory_size)),
        tmp_path / "numba",
    )
    assert out["groups"] == ["learn"]
    assert out["report"]["learn"][0] == 0
    assert out["cold_after"] == []  # with memory: the GRU's modules are cached too
    assert out["learn_compiled"] == []
    assert out["grad_norm"] > 0
    assert out["pass_signatures"] == [1, 1]


@pytest.mark.slow
def test_env_and_tracer_warmup_on_the_stand_in_leave_a_run_on_other_worlds_nothing_to_compile(tmp_path):
    """The env and tracer children compile on the shipped stand-in world; then an environment on two other
    worlds (a set, mapped read-only as a run maps it) is built, reset and stepped with every kernel of the
    environment, the tracer and the field loaded from the cache: no compilation. (The same watch does see a
    compile: the shortest paths' kernel called with float32 points, a signature no child compiled.) The
    stand-in's spawn pool is cached beforehand, as an earlier run leaves it (computed with Numba's JIT off,
    so no kernel is compiled): the env child reads it and must still compile the spawn grid's kernels."""
    navi_cache = tmp_path / "navi_cache"
    _run(
        """
        import json, tempfile
        from navi_nb.train import warmup
        from navi_nb.train.config import TrainConfig
        from navi_nb.train.runs import make_env
        cfg = TrainConfig(scenes="house:1,clutter:2", resolution=32, actors=6, sensor_az=8, sensor_el=4)
        make_env(warmup.stand_in_set(tempfile.mkdtemp()), cfg)
        print(json.dumps(True))
    """,
        tmp_path / "numba-unused",
        NUMBA_DISABLE_JIT="1",
        NAVI_NB_CACHE=str(navi_cache),
    )
    assert len(list((navi_cache / "spawn").glob("*.npz"))) == 1
    out = _run(
        """
        import json, tempfile
        import numpy as np
        from numba.core import event
        from navi_nb.train import warmup
        from navi_nb.train.config import TrainConfig
        cfg = TrainConfig(scenes="house:1,clutter:2", resolution=32, actors=6, sensor_az=8, sensor_el=4)
        warmup.GROUPS = {k: warmup.GROUPS[k] for k in ("env", "tracer")}  # this test's groups only
        w = warmup.start(cfg)
        groups = w.groups
        report = w.wait()
        from navi_nb.env import spawn
        from navi_nb.train.runs import make_env
        from navi_nb.world.compiler import compile_scene
        from navi_nb.world.world_set import WorldSet
        world_set = WorldSet([compile_scene("house", 32, seed=1), compile_scene("clutter", 32, seed=2)])
        world_set.map_layouts(tempfile.mkdtemp() + "/layouts")
        modules = {}

        class Watch(event.Listener):
            def on_start(self, ev):
                f = ev.data["dispatcher"].py_func
                modules.setdefault(f.__module__, []).append(f.__qualname__)

            def on_end(self, ev):
                pass

        event.register("numba:compile", Watch())
        env = make_env(world_set, cfg)
        env.compile_kernels()
        env.reset(seed=cfg.seed)
        for _ in range(3):
            obs = env.step(np.full((cfg.actors, 4), 0.5, np.float32))[0]
        watched = ("navi_nb.env", "navi_nb.sense", "navi_nb.world.field", "navi_nb.world.query")
        during = sorted(f"{m}.{q}" for m, qs in modules.items() if m.startswith(watched) for q in qs)
        pool = env._spawner
        pts = pool.pool[:2].astype(np.float32)
        spawn.path_lengths(pool.reach, pool.dims, pool.lo, float(pool.cell), pts, pts[::-1].copy())
        after = sorted(f"{m}.{q}" for m, qs in modules.items() if m.startswith(watched) for q in qs)
        print(json.dumps({"groups": groups, "report": report, "during": during, "after": after,
                          "finite": bool(np.isfinite(obs).all())}))
    """,
        tmp_path / "numba",
        NAVI_NB_CACHE=str(navi_cache),
    )
    assert out["groups"] == ["env", "tracer"]
    assert out["report"]["env"][0] == 0 and out["report"]["tracer"][0] == 0
    assert out["during"] == []
    assert "navi_nb.env.spawn.path_lengths" in out["after"]  # the watch sees a compile
    assert out["finite"]


def test_the_stand_in_world_is_the_world_caches_box_entry(tmp_path):
    """The shipped stand-in is what the world cache compiles for the built-in box at 32 voxels (the file bit for
    bit; the sidecar but for the compile's own timing and the cache entry's digest). When the compiler changes,
    regenerate it with ``python -c "from navi_nb.world.world_cache import compile_one; compile_one('box', 0, 32,
    'navi_nb/data/warmup/box-r32.gmdag')"``."""
    from navi_nb.train.warmup import STAND_IN
    from navi_nb.world.sidecar import read_sidecar
    from navi_nb.world.world_cache import compile_one

    fresh = tmp_path / "box.gmdag"
    compile_one("box", 0, 32, fresh)
    assert fresh.read_bytes() == STAND_IN.read_bytes()
    ours, theirs = read_sidecar(STAND_IN), read_sidecar(fresh)
    for side in (ours, theirs):
        side["compiler"].pop("seconds")
        side.pop("entry_digest", None)  # the cache's check of an entry, which covers the timing too
    assert ours == theirs


def test_the_shipped_stand_in_layout_is_the_one_a_run_writes(tmp_path):
    """The stand-in's shipped layout file is, byte for byte, the file that mapping the stand-in writes
    (``world_set.map_packed``), and the children map it from the package: they neither validate nor decode
    the stand-in. When the layout's format changes, regenerate it with ``python -c "from navi_nb.train.warmup
    import STAND_IN, STAND_IN_LAYOUTS; from navi_nb.world.gmdag import load_world; from navi_nb.world.world_set
    import WorldSet; WorldSet([load_world(STAND_IN)]).map_layouts(STAND_IN_LAYOUTS)"`` (and delete the old
    file)."""
    from navi_nb.train.warmup import STAND_IN, STAND_IN_LAYOUTS, stand_in_set
    from navi_nb.world.gmdag import load_world
    from navi_nb.world.world_set import WorldSet, layout_file

    fresh = WorldSet([load_world(STAND_IN)])
    fresh.map_layouts(tmp_path)
    written, _ = layout_file(fresh.worlds, tmp_path)
    shipped, _ = layout_file(fresh.worlds, STAND_IN_LAYOUTS)
    assert shipped.read_bytes() == written.read_bytes()
    assert sorted(p.name for p in STAND_IN_LAYOUTS.iterdir()) == [shipped.name]  # no stale file ships
    world_set = stand_in_set(tmp_path / "unused")
    assert world_set.packed.mapped == shipped and world_set.packed.map_note is None
    assert not (tmp_path / "unused").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_ends_when_the_process_that_started_it_is_killed(tmp_path):
    """A trainer killed outright leaves no warm-up child compiling behind it: the kernel ends the child with
    its parent (the learn child's helper is such a child of the learn child)."""
    import signal
    import time

    script = textwrap.dedent(
        """
        import sys, time
        from navi_nb.train import warmup
        from navi_nb.train.config import TrainConfig
        group, proc, err = warmup._spawn("learn", TrainConfig())
        print(proc.pid, flush=True)
        time.sleep(120)
        """
    )
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), PYTHONPATH=ROOT)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    child = int(parent.stdout.readline())
    time.sleep(4.0)  # the child is compiling by now (a cold learn group takes far longer than this test)
    assert os.path.exists(f"/proc/{child}")
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{child}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":  # ended, not yet reaped
                    break
        except FileNotFoundError:
            break
        time.sleep(0.1)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the warm-up child kept running after its parent was killed")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_whose_parent_ended_before_it_started_ends_at_once(tmp_path):
    """The kernel's signal covers only a parent that ends after the child asked for it: a child that finds its
    parent already gone (its parent pid is not the one that started it: a trainer killed while the child was
    still starting on a loaded machine) kills itself as the signal would have, before compiling anything."""
    import signal

    from navi_nb.train import warmup
    from navi_nb.train.config import TrainConfig

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), PYTHONPATH=ROOT)
    env[warmup.PARENT_VAR] = str(os.getpid() + 1)  # not this process, the child's real parent
    child = subprocess.run(
        [sys.executable, "-c", warmup._CHILD, "learn", json.dumps(TrainConfig().to_dict())],
        env=env,
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    assert child.returncode == -signal.SIGKILL, child
    assert not list(tmp_path.rglob("*.nbc"))  # it compiled nothing
    env[warmup.PARENT_VAR] = str(os.getpid())  # its parent, alive: it goes on (here: a group of no modules)
    child = subprocess.run(
        [sys.executable, "-c", "from navi_nb.train import warmup; warmup._end_with_parent(); print('on')"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 0 and child.stdout.strip() == "on", child


def test_warm_cache_starts_no_child(tmp_path):
    """Nothing cold, or the warm-up turned off: ``start`` starts no process."""
    out = _run(
        """
        import json, os
        import numpy as np
        from navi_nb.learn.gae import compute_gae
        from navi_nb.train import warmup
        from navi_nb.train.config import TrainConfig
        z = np.zeros((2, 2), np.float32)
        compute_gae(z, z, np.zeros((2, 2), bool), np.zeros((2, 2), bool), z, np.zeros(2, np.float32))
        real = warmup.GROUPS
        warmup.GROUPS = {"gae": ("navi_nb.learn.gae",)}  # a group whose one module is cached now
        warm = warmup.start(TrainConfig()).groups
        warmup.GROUPS = real
        os.environ["NAVI_NB_WARMUP"] = "0"
        print(json.dumps({"warm": warm, "cold": warmup.cold_groups(TrainConfig()),
                          "off": warmup.start(TrainConfig()).groups}))
    """,
        tmp_path / "numba",
    )
    assert out == {"warm": [], "cold": ["env", "tracer", "learn"], "off": []}


def test_peer_call_in_child_matches_in_process():
    """A peer function run in a child answers what it answers here; this process never imports the peer."""
    assert peers.call_in_child("navi_nb.bench.ppo.net_flops", obs=270, hidden=[64, 64]) == net_flops(270, (64, 64))
    assert peers.peer_available("numpy") and not peers.peer_available("no_such_peer_module")


def test_peer_failures_are_one_line_errors():
    with pytest.raises(peers.PeerError, match="no attribute 'no_such_bench'"):
        peers.call_in_child("navi_nb.bench.ppo.no_such_bench")
    with pytest.raises(peers.PeerError, match="not in navi_nb.bench"):
        peers.call_in_child("os.getcwd")
    if not peers.peer_available("embreex"):  # a peer library that is missing fails in the child, with its name
        with pytest.raises(peers.PeerError, match="embreex"):
            peers.PeerProcess("navi_nb.bench.trace.embree_peer", {"triangles": __import__("numpy").zeros((1, 3, 3))})


def test_env_compile_kernels_compiles_what_reset_and_step_call_and_changes_nothing(monkeypatch):
    """NavEnv.compile_kernels (called while the tracer's kernel compiles in a child): it compiles each
    kernel for exactly the argument types reset and step then pass, and leaves the state untouched."""
    import numpy as np
    from numba import typeof, types

    import navi_nb.env.nav_env as nav_env
    from navi_nb.sense.sensor import Sensor
    from navi_nb.world.compiler import compile_scene

    called, compiled = {}, {}

    class Recording:
        def __init__(self, name, kernel):
            self.name, self.kernel = name, kernel

        def __call__(self, *args):
            called.setdefault(self.name, set()).add(tuple(typeof(a) for a in args))
            return self.kernel(*args)

        def compile(self, sig):
            compiled.setdefault(self.name, set()).add(tuple(sig))
            return self.kernel.compile(sig)

    names = ("start_episodes", "write_tail", "move_actors", "score_step")
    for name in names:
        monkeypatch.setattr(nav_env, name, Recording(name, getattr(nav_env, name)))
    env = nav_env.NavEnv(compile_scene("box", 32), 3, sensor=Sensor(8, 2), seed=1)
    env.reset(seed=1)
    before = {k: np.array(v, copy=True) for k, v in env.get_state().items() if isinstance(v, np.ndarray)}
    env.compile_kernels()
    after = env.get_state()
    for key, value in before.items():
        assert np.array_equal(value, after[key]), key
    env.step(np.zeros((3, 4), np.float32))
    env.reset(seed=2)
    assert sorted(compiled) == sorted(names)
    for name in names:
        assert compiled[name] == called[name], name
        # what compile() built is what a call runs (a range kernel's ranges are two int64s before the args)
        kernel = getattr(nav_env, name).kernel
        dispatcher = getattr(kernel, "span", kernel)
        head = (types.int64, types.int64) if dispatcher is not kernel else ()
        for sig in called[name]:
            assert head + sig in dispatcher.signatures, name


@pytest.mark.slow
def test_the_layout_decoder_thread_compiles_what_packing_the_run_calls(tmp_path):
    """On a cold cache ``start`` compiles the layout decoder in a thread (on the stand-in) and ``wait``
    joins it; packing worlds loaded as a run loads them (mapped read-only) then compiles no other
    signature of the decoder's kernels."""
    out = _run(
        f"""
        import json
        from navi_nb.train import warmup
        from navi_nb.train.config import TrainConfig
        from navi_nb.world import layout
        from navi_nb.world.scene_spec import parse_spec
        from navi_nb.world.world_cache import load_worlds
        from navi_nb.world.world_set import decode_packed
        warmup.GROUPS = {{}}  # no child: the thread alone
        warm = warmup.start(TrainConfig())
        started = warm.decoder is not None
        warm.wait()
        kernels = (layout._number_nodes, layout._fill, layout._fill_top)
        before = [len(k.signatures) for k in kernels]
        worlds = load_worlds(parse_spec("house:3-4"), 32, cache_dir={str(tmp_path / "worlds")!r})
        decode_packed(worlds)
        print(json.dumps({{"started": started, "joined": warm.decoder is None, "before": before,
                          "after": [len(k.signatures) for k in kernels]}}))
    """,
        tmp_path / "numba",
    )
    assert out == {"started": True, "joined": True, "before": [1, 1, 1], "after": [1, 1, 1]}


def test_a_run_with_memory_counts_the_grus_modules_in_the_learn_group(monkeypatch):
    """The learn group is cold for a policy with memory while the GRU's kernels are not cached, and a run
    without memory never waits on them (it never compiles them)."""
    from navi_nb.train import warmup
    from navi_nb.train.config import TrainConfig

    asked = []
    monkeypatch.setattr(
        "navi_nb.jit_cache.cold_sources", lambda modules: asked.append(modules) or [m for m in modules if "gru" in m]
    )
    assert warmup.cold_groups(TrainConfig(memory_size=16)) == ["learn"]
    assert warmup.cold_groups(TrainConfig()) == []
    assert not any("navi_nb.learn.gru" in m for m in asked[-3:])


def test_a_run_with_the_map_counts_its_module_in_the_env_group(monkeypatch):
    """The env group (whose child builds the run's environment, map included) is cold for a run with the episodic
    map (map_cell > 0) while the map's kernels are not cached; a run without it, or with map_cell 0, never waits
    on them. The GRU's and the map's modules are asked for exactly when the run has them."""
    from navi_nb.train import warmup
    from navi_nb.train.config import TrainConfig

    asked = []
    cold = ("navi_nb.env.episodic_map", "navi_nb.learn.gru", "navi_nb.learn.memory_pass")
    monkeypatch.setattr(
        "navi_nb.jit_cache.cold_sources", lambda modules: asked.append(modules) or [m for m in modules if m in cold]
    )
    assert warmup.cold_groups(TrainConfig(env={"map_cell": 0.5})) == ["env"]
    assert warmup.cold_groups(TrainConfig(env={"map_cell": 0.5}, memory_size=8)) == ["env", "learn"]
    assert warmup.cold_groups(TrainConfig(env={"map_cell": 0})) == []
    assert warmup.cold_groups(TrainConfig(memory_size=8)) == ["learn"]
    asked.clear()
    assert warmup.cold_groups(TrainConfig()) == []
    assert not any(m in cold for modules in asked for m in modules)
    modules = warmup.run_modules(TrainConfig(env={"map_cell": 0.25}, memory_size=4))
    assert modules["env"] == warmup.GROUPS["env"] + ("navi_nb.env.episodic_map",)
    assert modules["learn"] == warmup.GROUPS["learn"] + ("navi_nb.learn.gru", "navi_nb.learn.memory_pass")
    assert modules["tracer"] == warmup.GROUPS["tracer"]
