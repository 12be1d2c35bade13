"""Structure-aware fuzzing of the readers (``navi-nb fuzz``), at the console layer.

Modules: ``outcomes`` (the one outcome vocabulary, ``OUTCOMES`` / ``FAILURES``, the one classifier
``classify`` and the ``Report`` tally), ``cases`` (``Case``, ``Target`` and what the targets share), one
module per target with its base files, mutators and readers (``gmdag``, ``mesh``, ``checkpoint``, ``cache``) and
``runner`` (``TARGETS``, ``run_case`` in this process, ``run_fuzz`` over a pool of worker processes).

This package may import every stage; nothing in navi_nb imports it but ``navi_nb/commands/fuzz.py``.
See docs/FUZZING.md.
"""
