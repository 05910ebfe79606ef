"""Checkpoints on a cluster (issue 35): each item gets $GPUPLAN_CHECKPOINT_DIR, kept on the head
while it runs and at its end; an attempt run again starts from what the last one left there,
not from a copy that happens to be on its node. The run on real Ray is in tests/test_run_engine.py
(test_an_item_run_again_starts_from_its_checkpoint), on that module's cluster: it started a Ray
cluster of its own here (150 s of the suite's slowest on 2 busy cores)."""

from __future__ import annotations


def test_a_checkpoint_interval_below_two_seconds_is_refused(cli, tmp_path):
    (tmp_path / "items.txt").write_text("a\n")
    r = cli("run", "nosuch", "--items", str(tmp_path / "items.txt"), "--checkpoint-every", "1s", "--", "echo", "{item}")
    assert r.code == 2 and "--checkpoint-every 1s: at least 2 s" in r.err and len(r.err.strip().splitlines()) == 1
