"""The trainer: the loop, its settings, run folders, checkpoints, metrics,
evaluation and the console report.

Modules, in the order a run uses them: ``config`` (``TrainConfig``),
``runs`` (run folders and the world cache), ``loop`` (``Trainer``: collect,
learn, log), ``checkpoint`` (exact, atomic, untrusted-input ``.npz``),
``metrics``, ``progress``, ``evaluate`` and ``render_episode``.
"""
