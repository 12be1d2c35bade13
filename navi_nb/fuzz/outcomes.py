"""The one outcome vocabulary of ``navi-nb fuzz`` and the one classifier every target's cases go through.

A case ends in one of

- ``ok``: it loaded, and every answer is as documented;
- ``rejected``: a ``NaviError`` whose message is one line (the wanted end for bad input);

or in a failure:

- ``crash``: the worker process died (a signal, e.g. a segfault);
- ``hang``: the case ran past the time limit;
- ``non-finite``: a query or a load answered a value the documentation does not allow
  (``NonFinite``: NaN or -inf distances, non-finite trace depths or loaded values);
- ``traceback``: any other exception (a bug), a NaviError spread over lines, or one that does not name the
  input it refuses (``Unnamed``, where a target knows the name: the ``gmdag`` target);
- ``wrong``: it loaded, but not what the undamaged input gives (``WrongAnswer``; the ``cache`` target:
  a run would train on other worlds, pools or layout than the clean cache's);
- ``refused``: a one-line NaviError where the target says the input must be recovered from (``Refused``;
  the ``cache`` target: a damaged file of a writable cache, which is rebuilt, not refused);
- ``warning``: it ended ok or rejected, but a Python warning (e.g. NumPy's overflow
  RuntimeWarning) was raised on the way: a user would see it printed.

``crash`` and ``hang`` are given by the runner (navi_nb/fuzz/runner.py), which watches the
worker processes; ``classify`` gives the rest. ``Report`` tallies outcomes per mutator and mode.
"""

from __future__ import annotations

import os
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass, field

from navi_nb.errors import NaviError

OUTCOMES = ("ok", "rejected", "crash", "hang", "non-finite", "traceback", "wrong", "refused", "warning")
FAILURES = ("crash", "hang", "non-finite", "traceback", "wrong", "refused", "warning")
DETAIL_CHARS = 300  # a case's detail is cut to this many characters


class NonFinite(Exception):
    """A query answered a value the documentation does not allow (NaN, -inf)."""


class WrongAnswer(Exception):
    """A load answered content other than the undamaged input's, and said nothing of it."""


class Unnamed(Exception):
    """A one-line rejection that does not name the input it refuses (the rejection's text)."""


class Refused(Exception):
    """A one-line refusal of an input the code should have recovered from (the refusal's text)."""


def classify(call) -> tuple[str, str]:
    """Run ``call()`` and name how it ended: ``(outcome, detail)``; never raises for the call's faults.

    The outcome is ``ok``, ``rejected``, ``non-finite``, ``traceback``, ``wrong``, ``refused`` or ``warning``
    (see the module).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            call()
            outcome, detail = "ok", ""
        except NaviError as exc:
            text = str(exc)
            outcome = "rejected" if text and "\n" not in text else "traceback"
            detail = f"{type(exc).__name__}: {text}"
        except NonFinite as exc:
            outcome, detail = "non-finite", str(exc)
        except WrongAnswer as exc:
            outcome, detail = "wrong", str(exc)
        except Refused as exc:
            outcome, detail = "refused", str(exc)
        except Unnamed as exc:
            outcome, detail = "traceback", str(exc)
        except Exception as exc:  # noqa: BLE001  (any other exception is the bug being looked for)
            tb = traceback.extract_tb(exc.__traceback__)
            where = f" at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno}" if tb else ""
            outcome, detail = "traceback", f"{type(exc).__name__}: {exc}{where}"
    if caught and outcome in ("ok", "rejected"):  # a user would see the warning printed before the answer
        w = caught[0]
        outcome, detail = (
            "warning",
            (
                f"{w.category.__name__}: {w.message} at {os.path.basename(w.filename)}:"
                f"{w.lineno} (then {outcome}) {detail}"
            ),
        )
    return outcome, detail[:DETAIL_CHARS]


@dataclass
class Report:
    target: str
    seed: int
    cases: int
    jobs: int
    timeout: float
    seconds: float = 0.0
    counts: Counter = field(default_factory=Counter)
    by_mutator: dict = field(default_factory=dict)  # mutator -> Counter of outcomes
    by_mode: dict = field(default_factory=dict)  # load mode / format / file kind -> Counter
    failures: list = field(default_factory=list)  # (index, outcome, mutator, mode, detail), first ones
    restarts: int = 0

    @property
    def failed(self) -> int:
        return sum(self.counts[o] for o in FAILURES)

    def add(self, index, outcome, mutator, mode, detail, keep_failures=50):
        self.counts[outcome] += 1
        self.by_mutator.setdefault(mutator, Counter())[outcome] += 1
        self.by_mode.setdefault(mode, Counter())[outcome] += 1
        if outcome in FAILURES and len(self.failures) < keep_failures:
            self.failures.append((index, outcome, mutator, mode, detail))

    def to_dict(self):
        return {
            "target": self.target,
            "seed": self.seed,
            "cases": self.cases,
            "jobs": self.jobs,
            "timeout_s": self.timeout,
            "seconds": round(self.seconds, 2),
            "worker_restarts": self.restarts,
            "counts": {o: self.counts[o] for o in OUTCOMES},
            "by_mutator": {k: dict(v) for k, v in sorted(self.by_mutator.items())},
            "by_mode": {k: dict(v) for k, v in sorted(self.by_mode.items())},
            "failures": [list(f) for f in self.failures],
        }
