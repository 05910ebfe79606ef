"""Issue 46 item 6: launch, probe, provision and bootstrap show one live display on a terminal
(gpuplan/cli/tables.py: LiveView) and the same plain lines as before elsewhere."""

from __future__ import annotations

import io
from decimal import Decimal

from rich.console import Console

from gpuplan.cli.tables import LiveView, working
from gpuplan.run.batches import Progress


def _look(ok, failed, running, total, eta_s, yen, over=False):
    return Progress("launch-1", "running", ok, failed, running, total, eta_s, yen, over)


def test_a_launch_on_a_terminal_draws_each_machines_step_a_progress_bar_and_the_yen_against_the_cap():
    console = Console(record=True, force_terminal=True, width=100, file=io.StringIO(), color_system=None)
    machines = ["gpu-1", "gpu-2"]
    with LiveView(console, cap_yen=Decimal(455), machines=lambda: machines, title="launching demo") as view:
        view.step("creating 2x g5.xlarge in aws/us-east-1")
        view.step("gpu-1 cuda/driver: running")
        view.step("gpu-2 cuda/driver: done in 41.0 s")
        view.step("gpu-1 cuda/driver: done in 44.2 s")
        view.batch(_look(3, 1, 2, 10, 1800, Decimal("123.4")))
    last = view.render()
    frame = Console(record=True, width=100, file=io.StringIO(), color_system=None)
    frame.print(last)
    text = frame.export_text()
    lines = text.splitlines()
    assert lines[0].startswith("launching demo (")
    assert "… creating 2x g5.xlarge in aws/us-east-1" in text
    # one line per machine, its latest step only
    assert [x.split()[0] for x in lines if x.startswith("gpu-")] == ["gpu-1", "gpu-2"]
    assert "cuda/driver: done in 44.2 s" in text and "cuda/driver: running" not in text
    bar = next(x for x in lines if "4/10 items" in x)
    assert bar.startswith("━" * 12 + " " * 18) and "(1 failed, 2 running), ETA 30 min" in bar  # 4 of 10 ended: 40 % drawn
    assert "¥123 so far of the max_yen cap, ¥455 as the ledger counts it" in text
    # what reached the terminal was drawn in place, not printed a line per step
    drawn = console.export_text()
    assert "¥123 so far of the max_yen cap" in drawn and drawn.count("… creating 2x") <= drawn.count("launching demo")


def test_the_bar_is_drawn_to_its_share_of_the_batch():
    def width(done, total):
        view = LiveView(Console(file=io.StringIO(), force_terminal=True, width=80))
        view.batch(_look(done, 0, 0, total, None, None))
        frame = Console(record=True, width=80, file=io.StringIO(), color_system="truecolor")
        frame.print(view.render())
        bar = next(x for x in frame.export_text().splitlines() if "items" in x)
        return bar, view.yen_line()

    bar, yen = width(0, 10)
    assert "0/10 items" in bar and "ETA -" in bar and yen == "? so far (no max_yen)"
    full, _ = width(10, 10)
    assert "10/10 items" in full and "━" * 30 in full


def test_not_a_terminal_prints_the_same_step_lines_as_before_and_draws_nothing():
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    with working(console, "provisioning demo", lambda: ["gpu-1"]) as step:
        step("creating 1x g5.xlarge in aws/us-east-1")
        step("gpu-1 cuda/driver: running")
    assert out.getvalue().splitlines() == ["… creating 1x g5.xlarge in aws/us-east-1", "… gpu-1 cuda/driver: running"]
