"""Same bits over MPI ranks: 1 rank x 1 thread, 1 x 2, 2 x 1 and 4 x 1 give byte-identical weights, Adam
state, generators and environment state, and a run saved at 2 ranks continues at 4 and at 1 with the same
bits; the point-to-point tree reduction and the allgather agree with one process at 2, 3 (uneven) and 4
ranks, and its schedule is checked for every split of up to 33 blocks; ranks map one read-only world
layout file. Runs ``tests/mpi_run.py`` under the ``mpiexec`` next to this Python (the ``mpi`` extra's ``mpich``
wheel puts it there); oversubscribed on a 2-core machine, which is fine for bits."""

import json
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # real mpiexec jobs: .ci/run runs them, the README's command does not

HERE = os.path.dirname(os.path.abspath(__file__))
MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")


def mpirun(n, *args, reduce="tree"):
    assert MPIEXEC, "mpi4py is installed but no mpiexec was found"
    env = dict(os.environ, NUMBA_NUM_THREADS="2", OMP_WAIT_POLICY="PASSIVE", NAVI_NB_REDUCE=reduce)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(HERE), env.get("PYTHONPATH", "")])
    out = subprocess.run(
        [MPIEXEC, "-n", str(n), sys.executable, os.path.join(HERE, "mpi_run.py"), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-3000:])
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return lines[0] if lines else None


def test_same_bits_at_any_rank_and_thread_count(tmp_path):
    one = mpirun(1, 1, 3)  # first: compiles the kernels once for the others
    assert one["ranks"] == 1 and one["threads"] == 1 and one["adam_t"] == 3 * 2 * 2
    assert one["episodes"] > 0 and one["bytes_sent"] == 0
    runs = [mpirun(1, 2, 3), mpirun(2, 1, 3), mpirun(4, 1, 3)]
    assert [(r["ranks"], r["threads"]) for r in runs] == [(1, 2), (2, 1), (4, 1)]
    for r in runs:
        assert r["ranks_agree"]
        assert (r["learner"], r["env"]) == (one["learner"], one["env"]), r
        assert json.dumps(r["stats"]) == json.dumps(one["stats"])  # reported losses, explained variance too
    assert runs[1]["bytes_sent"] > 0 and runs[2]["bytes_sent"] > 0
    # the hashes see the state: one update fewer gives others
    short = mpirun(2, 1, 2)
    assert short["learner"] != one["learner"] and short["env"] != one["env"]

    # saved at 2 ranks after 2 of 3 updates, resumed at 4 ranks and at 1
    saved = tmp_path / "state.npz"
    assert mpirun(2, 1, 3, f"save:2:{saved}") is None and saved.exists()
    for n in (4, 1):
        resumed = mpirun(n, 1, 3, f"load:{saved}")
        assert (resumed["learner"], resumed["env"]) == (one["learner"], one["env"]), n


def test_tree_reduction_same_bits_at_uneven_rank_counts():
    """32 actors in 8 blocks: at 3 ranks (3, 3, 2 blocks) rank 0's blocks end inside the tree's node
    [0, 4) and rank 1's straddle [0, 4) and [4, 8), so partial sums travel at inner nodes. The tree
    path at 2, 3 and 4 ranks and the allgather path at 3 give one process's bits."""
    one = mpirun(1, 1, 2, "actors:32")
    runs = [mpirun(n, 1, 2, "actors:32") for n in (2, 3, 4)] + [mpirun(3, 1, 2, "actors:32", reduce="allgather")]
    assert [(r["ranks"], r["reduce"]) for r in runs] == [(2, "tree"), (3, "tree"), (4, "tree"), (3, "allgather")]
    for r in runs:
        assert r["ranks_agree"] and r["bytes_sent"] > 0
        assert (r["learner"], r["env"]) == (one["learner"], one["env"]), r
        assert json.dumps(r["stats"]) == json.dumps(one["stats"])


def test_same_bits_when_ranks_hold_actor_counts_off_the_policy_chunk():
    """16 actors in blocks of 2 over 3 ranks hold 6, 6 and 4 actors: acting's forward chunks (and the
    critic's values of time-limit ends) must cover the same actors in every placement, or OpenBLAS's
    row-count-dependent rounding shows in the weights."""
    one = mpirun(1, 1, 2, "block:2")
    three = mpirun(3, 1, 2, "block:2")
    assert three["ranks_agree"] and three["bytes_sent"] > 0
    assert (three["learner"], three["env"]) == (one["learner"], one["env"])
    assert json.dumps(three["stats"]) == json.dumps(one["stats"])


def test_ranks_share_one_read_only_world_mapping(tmp_path):
    """Two ranks map the world's layout from one file (the first to come writes it): every packed array
    of both ranks lies in a mapping of that file, read-only, whose PSS is below its RSS (the pages are
    shared), and the observations are those of the layout decoded in memory."""
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", NUMBA_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(HERE), env.get("PYTHONPATH", "")])

    def run(n, folder):
        out = subprocess.run(
            [MPIEXEC, "-n", str(n), sys.executable, os.path.join(HERE, "mpi_world.py"), folder],
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(next(line for line in out.stdout.splitlines() if line.startswith("[")))

    decoded = run(1, "-")[0]
    assert decoded["mapped"] is None and all(decoded["writeable"])
    two = run(2, str(tmp_path / "layouts"))
    files = list((tmp_path / "layouts").iterdir())
    assert len(files) == 1 and files[0].suffix == ".layout"  # one file, no temporary left behind
    for r in two:
        assert r["mapped"] == str(files[0]) and not any(r["writeable"])
        for path, pss, rss in r["arrays"]:
            assert path == str(files[0]) and 0 < pss < rss, r["arrays"]
        assert r["obs"] == decoded["obs"] and r["bytes"] == decoded["bytes"]


def _simulate_tree(n_blocks, n_ranks, rng):
    """Every rank's ``rank_tree_schedule`` run against the others with rendezvous sends (a send waits
    for its receive): returns rank 0's root row and the one-process tree's sum."""
    import numpy as np

    from navi_nb.learn import blocks
    from navi_nb.parallel.ranks import split_blocks

    scale = np.float32(1e3) ** rng.integers(-2, 3, (n_blocks, 1)).astype(np.float32)
    vals = rng.standard_normal((n_blocks, 5)).astype(np.float32) * scale
    ref = vals.copy()
    ops, root = blocks.tree_ops(0, n_blocks, {(k, k + 1): k for k in range(n_blocks)})
    for d, left, right in ops:
        ref[d] = ref[left] + ref[right]
    ranges = split_blocks(n_blocks, n_ranks)
    plans = [blocks.rank_tree_schedule(n_blocks, ranges, r) for r in range(n_ranks)]
    bufs = []
    for r, (a, b) in enumerate(ranges):
        mine = vals[a:b].copy()
        local_ops, node_rows, _ = blocks.local_plan(n_blocks, a, b)
        for d, left, right in local_ops:
            mine[d] = mine[left] + mine[right]
        buf = np.full((plans[r][0], 5), np.nan, np.float32)
        buf[: len(node_rows)] = mine[node_rows]
        bufs.append(buf)
    at = [0] * n_ranks
    moved = True
    while moved:
        moved = False
        for r in range(n_ranks):
            steps = plans[r][1]
            while at[r] < len(steps):
                kind, *rest = steps[at[r]]
                if kind == blocks.ADD:
                    for d, left, right in rest[0]:
                        bufs[r][d] = bufs[r][left] + bufs[r][right]
                elif kind == blocks.SEND:
                    peer, theirs = rest[0], plans[rest[0]][1]
                    if at[peer] >= len(theirs) or theirs[at[peer]][:2] != (blocks.RECV, r):
                        break
                    bufs[peer][theirs[at[peer]][2]] = bufs[r][rest[1]]
                    at[peer] += 1
                else:
                    break  # a receive waits for its sender's turn
                at[r] += 1
                moved = True
    assert at == [len(p[1]) for p in plans], ("deadlock", n_blocks, n_ranks, at)
    assert all(p[2] == -1 for p in plans[1:])
    return bufs[0][plans[0][2]], ref[root]


def test_tree_schedule_adds_as_one_process_for_every_split():
    """For 1..33 blocks over 1..9 ranks: the point-to-point schedule, run with sends that wait for their
    receives, ends without deadlock and rank 0 holds the one-process tree's sum bit for bit."""
    import numpy as np

    rng = np.random.default_rng(5)
    for n in range(1, 34):
        for r in range(1, min(n, 9) + 1):
            got, want = _simulate_tree(n, r, rng)
            assert got.tobytes() == want.tobytes(), (n, r)


def test_tree_schedule_of_three_ranks_over_eight_blocks():
    """Blocks [0, 3), [3, 6), [6, 8): rank 1 sends block 3 to rank 0 (node [2, 4) is rank 0's) and then its
    node [4, 8), which it completes with rank 2's [6, 8)."""
    from navi_nb.learn import blocks

    ranges = [(0, 3), (3, 6), (6, 8)]
    flat = []
    for r in range(3):
        n_rows, steps, root = blocks.rank_tree_schedule(8, ranges, r)
        flat.append([(s[0], s[1].tolist()) if s[0] == blocks.ADD else s for s in steps])
    # rank 0's rows: [0, 2), [2, 3), then received [3, 4) and [4, 8)
    assert flat[0] == [
        (blocks.RECV, 1, 2),
        (blocks.ADD, [[1, 1, 2], [0, 0, 1]]),
        (blocks.RECV, 1, 3),
        (blocks.ADD, [[0, 0, 3]]),
    ]
    # rank 1's rows: [3, 4), [4, 6), then received [6, 8)
    assert flat[1] == [(blocks.SEND, 0, 0), (blocks.RECV, 2, 2), (blocks.ADD, [[1, 1, 2]]), (blocks.SEND, 0, 1)]
    assert flat[2] == [(blocks.SEND, 1, 0)]


def test_memory_same_bits_at_one_and_two_ranks():
    """The policy with memory: its minibatches of whole actor sequences and the GRU's block gradients in the
    tree give the same weights, generators, environment and actor states at 1 and 2 ranks, both reductions."""
    one = mpirun(1, 1, 3, "memory:8")
    assert one["adam_t"] == 3 * 2 * 2 and one["episodes"] > 0
    for reduce in ("tree", "allgather"):
        two = mpirun(2, 1, 3, "memory:8", reduce=reduce)
        assert two["ranks"] == 2 and two["ranks_agree"] and two["bytes_sent"] > 0
        assert (two["learner"], two["env"]) == (one["learner"], one["env"]), reduce
    assert one["learner"] != mpirun(1, 1, 3)["learner"]  # the memory is in the weights


def test_map_same_bits_at_one_and_two_ranks():
    """With the episodic map on (its grids in the environment state, its crop in the observations the GRU
    reads): the same weights, generators, environment and actor states at 1 and 2 ranks."""
    one = mpirun(1, 1, 3, "memory:8", "map:0.5")
    assert one["episodes"] > 0
    two = mpirun(2, 1, 3, "memory:8", "map:0.5")
    assert two["ranks"] == 2 and two["ranks_agree"] and two["bytes_sent"] > 0
    assert (two["learner"], two["env"]) == (one["learner"], one["env"])
    assert one["env"] != mpirun(1, 1, 3, "memory:8")["env"]  # the maps are in the state
    skip = mpirun(1, 1, 3, "memory:8", "map:0.5", "trunks:skip-map")  # the GRU alone reads the crop
    assert mpirun(2, 1, 3, "memory:8", "map:0.5", "trunks:skip-map")["learner"] == skip["learner"]
    assert skip["learner"] != one["learner"]


def test_ranks_with_different_reductions_are_refused():
    script = [sys.executable, os.path.join(HERE, "mpi_run.py"), "1", "1"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run(
        [MPIEXEC, "-n", "1", "-env", "NAVI_NB_REDUCE", "tree", *script]
        + [":", "-n", "1", "-env", "NAVI_NB_REDUCE", "allgather", *script],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode != 0
    assert "rank 1 was started with NAVI_NB_REDUCE=allgather, rank 0 with tree" in out.stderr


def test_reduce_mode_is_checked():
    from navi_nb.parallel.ranks import RankError, reduce_mode

    assert reduce_mode({}) == "tree" and reduce_mode({"NAVI_NB_REDUCE": "allgather"}) == "allgather"
    with pytest.raises(RankError, match="NAVI_NB_REDUCE='ring': must be one of tree, allgather"):
        reduce_mode({"NAVI_NB_REDUCE": "ring"})


TINY = [
    "train",
    "--scenes",
    "box",
    "--resolution",
    "32",
    "--actors",
    "8",
    "--actor-block",
    "4",
    "--sensor-az",
    "8",
    "--sensor-el",
    "4",
    "--rollout-steps",
    "16",
    "--hidden",
    "16",
    "--update-epochs",
    "1",
    "--num-minibatches",
    "2",
    "--total-steps",
    "384",
    "--checkpoint-every",
    "1",
    "--eval-episodes",
    "2",
    "--env",
    "max_steps=20",
    "--no-progress",
    "--shards",
    "1",
]


def navi(n, *args):
    """``navi-nb ARGS`` in one process (n = 0) or under ``mpiexec -n n``."""
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(HERE), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "navi_nb", *args]
    if n:
        cmd = [MPIEXEC, "-n", str(n), *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)


def arrays(path):
    import numpy as np

    with np.load(path) as z:
        return {k: np.asarray(z[k]).tobytes() for k in z.files if k != "meta.json"}


def test_cli_train_over_ranks(tmp_path):
    """``mpiexec -n 2 navi-nb train`` writes the same checkpoints as one process, rank 0 alone writes, the
    run's config.json shows the topology, and a run resumes at another rank count with the same bits."""
    one = navi(0, *TINY, "--run-dir", str(tmp_path), "--name", "one")
    assert one.returncode == 0, one.stderr[-3000:]
    two = navi(2, *TINY, "--run-dir", str(tmp_path), "--name", "two")
    assert two.returncode == 0, two.stderr[-3000:]
    assert two.stdout.count("run folder:") == 1  # rank 0 alone prints
    for u in range(1, 4):  # the three kept
        name = f"checkpoints/ckpt_{u:08d}.npz"
        assert arrays(tmp_path / "one" / name) == arrays(tmp_path / "two" / name), name
    topo = json.loads((tmp_path / "two" / "config.json").read_text())["topology"]
    assert topo["ranks"] == 2 and [r["actors"] for r in topo["per_rank"]] == [4, 4]
    assert [r["blocks"] for r in topo["per_rank"]] == [[0, 1], [1, 2]]
    record = json.loads((tmp_path / "two" / "run.json").read_text())["segments"]
    assert (
        record[-1]["topology"]["ranks"] == 2
        and "topology" not in json.loads((tmp_path / "one" / "run.json").read_text())["segments"][-1]
    )
    # the world's layout mapped from one file, its pages shared: each rank's PSS of it below its RSS
    assert topo["world"]["mapped_from"].endswith(".layout") and topo["world"]["layout_bytes"] > 0
    assert [m["rank"] for m in topo["ram"]] == [0, 1]
    for m in topo["ram"]:
        assert 0 < m["world_pss"] < m["world_rss"] and 0 < m["pss"] < m["rss"], m
    # the one-process run, cut back to update 2, resumed over 2 ranks
    shutil.copytree(tmp_path / "one", tmp_path / "cut")
    (tmp_path / "cut" / "checkpoints" / "ckpt_00000003.npz").unlink()
    resumed = navi(2, "train", "--resume", str(tmp_path / "cut"), "--no-progress", "--eval-episodes", "0")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    name = "checkpoints/ckpt_00000003.npz"
    assert arrays(tmp_path / "cut" / name) == arrays(tmp_path / "one" / name)


def test_ranks_with_different_configs_are_refused(tmp_path):
    base = [sys.executable, "-m", "navi_nb", *TINY, "--run-dir", str(tmp_path)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run(
        [MPIEXEC, "-n", "1", *base, "--seed", "1", ":", "-n", "1", *base, "--seed", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 2, (out.returncode, out.stderr[-3000:])  # every rank ended itself: no Abort
    assert "rank 1 was started with config hash" in out.stderr
    assert not any(tmp_path.iterdir())  # refused before any file was written
    out = subprocess.run(
        [MPIEXEC, "-n", "1", *base, ":", "-n", "1", *base, "--checkpoint-every", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode != 0 and "rank 1 was started with checkpoint_every 2, rank 0 with 1" in out.stderr


@pytest.mark.parametrize(
    "rank0, rank1, said",
    [
        (["--print-config"], [], "rank 1 was started with action 'a new run', rank 0 with '--print-config'"),
        (["--resume", "RUN"], ["--name", "r"], "rank 1 was started with action 'a new run', rank 0 with '--resume'"),
        (["--name", "a"], ["--name", "b"], "rank 1 was started with run folder"),
    ],
    ids=["print-config", "resume-or-new", "folders"],
)
def test_ranks_given_different_commands_are_refused_together(tmp_path, rank0, rank1, said):
    """Ranks with one config but different commands (one prints the config, one resumes where the other starts
    a new run, two folders) compare what they are about to do before any other collective: one line from
    rank 0, exit 2, nothing written, instead of ranks waiting in different collectives until killed."""
    runs = tmp_path / "runs"
    base = [sys.executable, "-m", "navi_nb", *TINY, "--run-dir", str(runs)]
    rank0 = [str(runs / "r") if a == "RUN" else a for a in rank0]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]))
    if "--resume" in rank0:
        base0 = [sys.executable, "-m", "navi_nb", "train", "--no-progress"]
    else:
        base0 = base
    out = subprocess.run(
        [MPIEXEC, "-n", "1", *base0, *rank0, ":", "-n", "1", *base, *rank1],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,  # the ranks used to wait for each other until killed
    )
    assert out.returncode == 2, (out.returncode, out.stderr[-3000:])
    lines = [line for line in out.stderr.splitlines() if "rank" in line]
    assert len(lines) == 1 and said in lines[0], out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    assert not runs.exists() or not any(runs.iterdir())  # nothing written


def test_ranks_that_load_different_worlds_are_refused(tmp_path):
    """Each rank with its own world cache, rank 1's holding another compile of the box (a valid entry whose
    sidecar names seed 1): the ranks compare world digests at start and stop with one line naming the world
    and the rank, before any update; the same caches with the same entry train."""
    from navi_nb.world.compiler import compile_scene
    from navi_nb.world.world_cache import _write_entry, entry_path

    caches = [tmp_path / "cache0", tmp_path / "cache1"]
    _write_entry(compile_scene("box", 32, 1), entry_path(caches[1] / "worlds", "box", 0, 32))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]))
    base = [sys.executable, "-m", "navi_nb", *TINY, "--run-dir", str(tmp_path / "runs")]
    cmd = [MPIEXEC, "-n", "1", "-env", "NAVI_NB_CACHE", str(caches[0]), *base, "--name", "a"]
    cmd += [":", "-n", "1", "-env", "NAVI_NB_CACHE", str(caches[1]), *base, "--name", "a"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode != 0
    refusal = "loaded world 0 (box:0) with content"
    lines = [line for line in out.stderr.splitlines() if refusal in line and "stopped the run" in line]
    assert lines and all(line.count("stopped the run") == 1 for line in lines), (out.returncode, out.stderr[-3000:])
    assert len(lines) == 1 and "rank 0 of 2" in lines[0], lines  # one rank says it; none is torn down
    assert "rank 1 on " in lines[0] and "every rank must load the same worlds" in lines[0], lines
    assert not (tmp_path / "runs" / "a" / "checkpoints").exists()
    shutil.rmtree(caches[1])
    shutil.copytree(caches[0], caches[1])
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]


def test_more_ranks_than_blocks_is_refused(tmp_path):
    out = navi(4, *TINY, "--run-dir", str(tmp_path))  # 8 actors in blocks of 4: two blocks
    assert out.returncode != 0
    assert "4 ranks for 2 actor blocks" in out.stderr


def _ranks_of(launcher_pid):
    """The rank processes under ``mpiexec`` (its children's children: Hydra starts a proxy per host)."""

    def children(pid):
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                return [int(x) for x in f.read().split()]
        except OSError:
            return []

    found = []
    for c in children(launcher_pid):
        found += [g for g in children(c)] or [c]
    return found


@pytest.mark.parametrize("how", ["kill a rank", "ctrl-c"])
def test_a_lost_rank_stops_the_job_and_the_run_resumes(tmp_path, how):
    import signal
    import time

    args = list(TINY)
    args[args.index("--total-steps") + 1] = str(128 * 400)
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(HERE), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen(
        [MPIEXEC, "-n", "2", sys.executable, "-m", "navi_nb", *args, "--run-dir", str(tmp_path), "--name", "r"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    ckpts = tmp_path / "r" / "checkpoints"
    deadline = time.time() + 300
    while time.time() < deadline and not (ckpts.exists() and len(list(ckpts.glob("ckpt_*.npz"))) >= 3):
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    t0 = time.time()
    if how == "kill a rank":
        ranks = _ranks_of(proc.pid)
        assert len(ranks) == 2, ranks
        os.kill(ranks[1], signal.SIGKILL)
    else:
        proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    stopped_in = time.time() - t0
    assert proc.returncode != 0 and stopped_in < 15, (stopped_in, err[-2000:])
    if how == "ctrl-c":
        assert "interrupted" in err
    # the newest checkpoint loads and the run continues from it (here in one process)
    from navi_nb.train.loop import Trainer
    from navi_nb.train.runs import RunError

    newest = max(int(p.stem.split("_")[1]) for p in ckpts.glob("ckpt_*.npz"))
    # mpiexec can return while an interrupted rank 0 is still exiting with the run folder's lock held:
    # the lock is free once that process is gone (it never outlives it)
    deadline = time.time() + 30
    while True:
        try:
            trainer = Trainer.resume(tmp_path / "r")
            break
        except RunError as exc:
            if "is in use" not in str(exc) or time.time() > deadline:
                raise
            time.sleep(0.2)
    assert trainer.update == newest >= 2
    trainer.train(progress=False, stop_after=1)
    assert trainer.update == newest + 1 and (ckpts / f"ckpt_{newest + 1:08d}.npz").exists()
