"""The tiny training run the CLI tests start: a few actors, a few updates, seconds on 2 cores."""

TINY_FLAGS = {
    "resolution": 32,
    "actors": 4,
    "sensor-az": 8,
    "sensor-el": 4,
    "rollout-steps": 16,
    "hidden": 16,
    "update-epochs": 1,
    "num-minibatches": 2,
    "total-steps": 128,
    "checkpoint-every": 1,
    "eval-episodes": 4,
    "env": "max_steps=20",
}


def tiny_run_args(scenes="box", **flags):
    """`navi-nb train` flags of the tiny run (``scenes=None``: no --scenes); keyword flags override
    (underscores for hyphens), e.g. ``tiny_run_args(eval_episodes=6)``."""
    values = dict(TINY_FLAGS, **{k.replace("_", "-"): v for k, v in flags.items()})
    args = [] if scenes is None else ["--scenes", scenes]
    for name, value in values.items():
        args += [f"--{name}", str(value)]
    return args + ["--no-progress"]
