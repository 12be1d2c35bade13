"""The cores a process may use. The reader lives in :mod:`navi_nb.cores`, a shared top-level module, so
that every stage may ask (the environment's Gymnasium adapters size their threads by it); this module keeps
the ``navi_nb.parallel.cores`` name its users import."""

from navi_nb.cores import CoreReport, allowed_cores, read_quota

__all__ = ["CoreReport", "allowed_cores", "read_quota"]
