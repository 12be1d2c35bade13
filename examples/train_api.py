"""Train through the Python API instead of the CLI (a short run on `box`).

    python examples/train_api.py [RUN_DIR] [TOTAL_STEPS]

The same settings the `navi-nb train` flags set are fields of TrainConfig.
"""

import sys

from rich.console import Console

from navi_nb.train.config import TrainConfig
from navi_nb.train.loop import Trainer

run_dir = sys.argv[1] if len(sys.argv) > 1 else "runs/api-box"
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
    seed=1,
)
trainer = Trainer.create(cfg, console=Console(), run_path=run_dir)
summary = trainer.train(progress=False)
print({k: summary[k] for k in sorted(summary) if not isinstance(summary[k], (list, dict))})
print("metrics:", trainer.run_path / "metrics.csv")
