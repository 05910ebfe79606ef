"""Checkpoints on a cluster (issue 35): each item gets $GPUPLAN_CHECKPOINT_DIR, kept on the head
while it runs and at its end; an attempt run again starts from what the last one left there,
not from a copy that happens to be on its node. Real sshd, real Ray on two loopback hosts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from test_teardown_engine import hosts  # noqa: F401 - the two loopback hosts with Ray, as a fixture

pytestmark = pytest.mark.sshd

# Counts to 3 in its checkpoint, then fails when it began from nothing; run again, it goes on
# from where the checkpoint says and counts to 5. Without the checkpoint kept, every attempt
# begins from nothing and fails.
ITEM = ('f="$GPUPLAN_CHECKPOINT_DIR/step"; s=$(cat "$f" 2>/dev/null || echo 0); start=$s; '
        'while [ "$s" -lt 3 ]; do s=$((s+1)); echo $s > "$f"; sleep 0.3; done; '
        '[ "$start" = 0 ] && exit 1; '
        'while [ "$s" -lt 5 ]; do s=$((s+1)); echo $s > "$f"; done; echo "{item} from $start to $s" > {out}/result')


def test_an_item_run_again_starts_from_its_checkpoint(hosts, cli, tmp_path):  # noqa: F811
    started, port = hosts
    assert cli("provision", "baremetal:t4", "x2", "--name", "gone", "--no-bootstrap", "--yes").code == 0
    (tmp_path / "items.txt").write_text("a\nb\n")
    env = {**os.environ, "GPUPLAN_RAY_PORT": str(port)}
    done = subprocess.run([sys.executable, "-m", "gpuplan", "run", "gone", "--items", str(tmp_path / "items.txt"),
                           "--retries", "1", "--checkpoint-every", "2s", "--down", "--fetch", str(tmp_path / "out"),
                           "--", "sh", "-c", ITEM], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 ok of 2 items" in " ".join(done.stdout.split())
    results = sorted(p.read_text().strip() for p in (tmp_path / "out").glob("*/result"))
    assert results == ["a from 3 to 5", "b from 3 to 5"]
    from gpuplan import paths
    from gpuplan.store.state import State

    state = State(paths.state_db())
    [job] = state.jobs("gone")
    assert json.loads(json.dumps(job.options)).get("checkpoint_every_s") == 2
    state.close()


def test_a_checkpoint_interval_below_two_seconds_is_refused(cli, tmp_path):
    (tmp_path / "items.txt").write_text("a\n")
    r = cli("run", "nosuch", "--items", str(tmp_path / "items.txt"), "--checkpoint-every", "1s", "--", "echo", "{item}")
    assert r.code == 2 and "--checkpoint-every 1s: at least 2 s" in r.err and len(r.err.strip().splitlines()) == 1
