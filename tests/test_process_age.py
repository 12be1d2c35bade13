"""The time a run counts its first tick from: the program's own start, even where a shell exec'd it in
place of a subshell that did other work first."""

import shutil
import subprocess
import sys

import pytest

PROBE = (
    "import time, navi_nb; from navi_nb.train.runs import process_age; "
    "age = process_age(); print(age, time.time() - navi_nb.IMPORTED_AT)"
)


def _age(script):
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, check=True)
    age, since_import = (float(v) for v in out.stdout.split()[-2:])
    return age, since_import


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_program_execd_into_a_busy_subshell_counts_from_its_own_start():
    py = sys.executable
    # bash runs the last command of ( a && b ) in the subshell's own process: /proc's start time is the
    # subshell's, 3 s before the program began
    # (compared with the time since navi_nb's import, read right after: a loaded machine may take seconds to
    # import, so no fixed bound would do)
    late, late_import = _age(f'(sleep 3 && "{py}" -c "{PROBE}")')
    assert 0.0 < late <= late_import + 0.05  # counted from the program's import, not the subshell's start
    plain, plain_import = _age(f'"{py}" -c "{PROBE}"; true')
    assert 0.0 < plain and plain_import - 0.05 <= plain <= plain_import + 2.05  # /proc's start, before the import
