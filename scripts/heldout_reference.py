"""Write the package's held-out reference file (navi_nb/data/heldout/reference.json.gz): the fingerprints of the
first hundred held-out worlds of every seeded family, from their analytic scenes.

    .venv/bin/python scripts/heldout_reference.py

Run it after a change to a family's generator (its GENERATOR_VERSION) or to the fingerprint's lattice; the
tests refuse a file whose spec is not the code's (tests/test_heldout_geometry.py).
"""

import time

from navi_nb.files import write_atomic
from navi_nb.world.heldout import REFERENCE_FILE, build_reference, reference_labels

if __name__ == "__main__":
    t0 = time.perf_counter()
    data = build_reference()
    REFERENCE_FILE.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(REFERENCE_FILE, data)
    n = len(reference_labels())
    print(f"{REFERENCE_FILE}: {n} worlds, {len(data):,} bytes, {time.perf_counter() - t0:.1f} s")
