"""The live training display at 80 and 120 columns: every key figure whole, no line past the edge."""

import io

import pytest
from rich.console import Console

from navi_nb.train.config import TrainConfig
from navi_nb.train.progress import TrainDisplay, TrainProgress, clock, pack

ROW = {
    "update": 1_220,
    "global_step": 12_492_800,
    "actor_steps_per_s": 123_456.7,
    "success_rate": 0.4567,
    "return_mean": 1.2345,
    "length_mean": 181.4,
    "policy_loss": 0.00345,
    "value_loss": 12.5,
    "approx_kl": 0.00123,
    "entropy": 1.4189,
}
KEY = ["upd 1,220/2,442", "12,492,800 steps", "123,457 steps/s", "ETA ", "success 46%", "return 1.23"]
REST = ["len 181", "pg 0.00345", "v 12.5", "kl 0.00123", "ent 1.42"]


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def render(renderable, width):
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.export_text()


@pytest.mark.parametrize("width", [80, 120])
def test_display_fits_and_shows_every_figure_whole(width):
    t = FakeClock()
    d = TrainDisplay(total_updates=2_442, start_update=0, clock_fn=t)
    t.t += 50.0  # the first update (compiling)
    d.update(dict(ROW, update=1))
    t.t += 1_219 * 2.0  # then 2 s per update
    d.update(ROW)
    text = render(d, width)
    lines = text.rstrip("\n").split("\n")
    assert all(len(line) <= width for line in lines), lines
    assert "━" in lines[0]
    for field in KEY[:4]:
        assert field in lines[0], (field, lines[0])
    # the time left comes from the updates after the first: 1,222 more at 2 s each
    assert f"ETA {clock(1_222 * 2.0)}" in lines[0]
    assert lines[1].startswith("success 46%  return 1.23")
    for field in REST:
        assert sum(line.count(field) for line in lines) == 1, (field, lines)
    if width >= 120:
        assert len(lines) == 2  # everything on two lines


def test_display_before_the_first_update_and_narrow_terminal():
    d = TrainDisplay(total_updates=10, start_update=3, clock_fn=FakeClock())
    assert "upd 3/10  collecting the first rollout..." in render(d, 80)
    d.update(ROW)
    lines = render(d, 40).rstrip("\n").split("\n")
    assert all(len(line) <= 40 for line in lines)
    assert set(lines[0]) <= {"━"}  # the bar alone; the fields follow whole
    for field in ["upd 1,220/10", "12,492,800 steps", "123,457 steps/s", *REST]:
        assert any(field in line for line in lines), field


def test_pack_keeps_fields_whole():
    assert pack(["aaaa", "bbbb", "cc"], 10) == ["aaaa  bbbb", "cc"]
    assert pack(["aaaaaaaaaaaa", "b"], 10) == ["aaaaaaaaaaaa", "b"]
    assert clock(3_725.4) == "1:02:05" and clock(None) == "-:--:--"


def test_plain_lines_without_a_terminal():
    out = io.StringIO()
    console = Console(width=80, file=out, color_system=None)
    cfg = TrainConfig(actors=8, rollout_steps=16, total_steps=2 * 128)
    with TrainProgress(console, cfg, 0) as prog:
        assert prog._live is None and prog.plain
        prog.advance(dict(ROW, update=1, global_step=128))
        prog.advance(dict(ROW, update=2, global_step=256))
    lines = out.getvalue().rstrip("\n").split("\n")
    assert len(lines) == 2  # one whole line per print: the first update and the last
    assert lines[1].startswith("upd 2  256 steps  123,457 steps/s  success 46%  return 1.23")
    assert "kl 0.00123  ent 1.42" in lines[1] and lines[1].endswith("ETA 0:00:00")


def test_live_display_on_a_terminal():
    out = io.StringIO()
    console = Console(width=80, file=out, force_terminal=True, color_system=None)
    cfg = TrainConfig(actors=8, rollout_steps=16, total_steps=2 * 128)
    with TrainProgress(console, cfg, 0) as prog:
        assert prog._live is not None
        prog.advance(dict(ROW, update=2, global_step=256))
    text = out.getvalue()
    assert "upd 2/2  256 steps  123,457 steps/s  ETA 0:00:00" in text
    assert "success 46%  return 1.23" in text


def test_plain_lines_on_a_terminal_keep_fields_whole():
    out = io.StringIO()
    console = Console(width=80, file=out, force_terminal=True, color_system=None)
    cfg = TrainConfig(actors=8, rollout_steps=16, total_steps=2 * 128)
    with TrainProgress(console, cfg, 0, enabled=False) as prog:  # --no-progress
        assert prog._live is None and prog.plain
        prog.advance(dict(ROW, update=2, global_step=256))
    lines = out.getvalue().rstrip("\n").split("\n")
    assert all(len(line) <= 80 for line in lines)
    for field in ["upd 2/2", "256 steps", "123,457 steps/s", "ETA 0:00:00", "success 46%", "return 1.23", *REST]:
        assert any(field in line for line in lines), field
