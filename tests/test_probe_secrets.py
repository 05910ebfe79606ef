"""`gpuplan probe` runs the batch's own job with its env: and secret_env: (launcher.start), so it
refuses a secret the caller's environment lacks before any probe is planned or bought, as
launch does (issue 43 item 2), the dry run too, and writes nothing."""

from __future__ import annotations

BATCH = "items: items.txt\ncommand: echo {item} {units}\nworkload: colorize-hd\ninfra: [aws]\n"
UNSET = "GPUPLAN_TEST_PROBE_SECRET_NOT_SET"


def test_probe_refuses_an_unset_secret_before_planning(cli, tmp_path, monkeypatch, gpuplan_home):
    (tmp_path / "items.txt").write_text("a.mp4\n")
    (tmp_path / "b.yaml").write_text(BATCH + f"secret_env: [{UNSET}]\n")
    monkeypatch.delenv(UNSET, raising=False)
    r = cli("probe", str(tmp_path / "b.yaml"), "--dry-run")
    assert r.code == 2 and r.err.strip().splitlines() == [
        f"gpuplan: error: secret_env {UNSET}: not set in this environment; export {UNSET} (its value) before running,"
        f" or leave {UNSET} out"], r.err
    assert r.out == ""  # refused before the plan's table
    assert not (gpuplan_home / "state.db").exists()
    monkeypatch.setenv(UNSET, "s3cr3t-value")
    r = cli("probe", str(tmp_path / "b.yaml"), "--dry-run", "--probe-budget", "500")
    assert r.code == 0, r.err
    assert "aws:g5.xlarge (A10G, the pick)" in r.out and "dry run: nothing was run" in r.out
    assert "s3cr3t-value" not in r.out + r.err
