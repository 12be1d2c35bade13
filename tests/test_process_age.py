"""The time a run counts its first tick from: the program's own start, even where a shell exec'd it in
place of a subshell that did other work first."""

import shutil
import subprocess
import sys

import pytest

PROBE = "from navi_nb.train.runs import process_age; print(process_age())"


def _age(script):
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, check=True)
    return float(out.stdout.split()[-1])


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_program_execd_into_a_busy_subshell_counts_from_its_own_start():
    py = sys.executable
    # bash runs the last command of ( a && b ) in the subshell's own process: /proc's start time is the
    # subshell's, 3 s before the program began
    late = _age(f'(sleep 3 && "{py}" -c "{PROBE}")')
    plain = _age(f'"{py}" -c "{PROBE}"; true')
    assert 0.0 < late < 2.5
    assert 0.0 < plain < 2.5
