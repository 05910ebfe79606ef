"""A submission to a warm cluster without Ray here (engine.warm, engine.submit): the check that
skips the `ray` playbook, the driver's code uploaded once per version, and the Jobs API call
through the SSH tunnel with its retries, against a connection that records what it was asked.
Ray itself: tests/test_run_engine.py."""

from __future__ import annotations

import json
import socket
import subprocess
import threading

import pytest

from gpuplan.hosts import remote
from gpuplan.run.ray import engine


class FakeConn:
    """One SSH connection to the head: commands and uploads recorded; each tunnel to the Jobs
    API answers the next of `answers` (an exception: the tunnel is refused)."""

    def __init__(self, code_hash: str, answers):
        self.code_hash, self.answers = code_hash, list(answers)
        self.cmds: list[tuple[str, str | None]] = []
        self.puts: list[str] = []
        self.requests: list[dict] = []
        self.closed = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.closed = True

    def run(self, cmd, timeout=600, sudo=False, stdin=None):
        self.cmds.append((cmd, stdin))
        out = f"/home/u\n{self.code_hash}  -\n" if "sha256sum" in cmd else ""
        return remote.Result(0, out, "", 0.01)

    def put(self, local, path, mode=None):
        self.puts.append(path)

    def open_tunnel(self, address, port):
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        status, text = answer
        mine, theirs = socket.socketpair()

        def serve() -> None:
            with theirs:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += theirs.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
                while len(body) < length:
                    body += theirs.recv(65536)
                self.requests.append({"line": head.split(b"\r\n")[0].decode(), "body": json.loads(body)})
                out = text.encode()
                theirs.sendall(f"HTTP/1.1 {status} X\r\nContent-Length: {len(out)}\r\nConnection: close\r\n\r\n".encode() + out)

        threading.Thread(target=serve, daemon=True).start()
        return mine


def _engine(nodes: int = 2) -> engine.Engine:
    hosts = [remote.Host(f"c-{i}", "127.0.0.1", 2200 + i, "root", None, "ssh-ed25519 AAAA") for i in range(nodes)]
    return engine.Engine("c", tuple(engine.Node(h.name, h, h.address, 1, i) for i, h in enumerate(hosts)),
                         engine.Layout("/opt/ray", 6380))


@pytest.fixture(autouse=True)
def nothing_kept(monkeypatch):
    monkeypatch.setattr(engine, "_kept", {})


@pytest.fixture
def head(monkeypatch):
    """Installs a FakeConn as every connection: head(code_hash, answers) -> it."""
    monkeypatch.setattr(engine.time, "sleep", lambda _s: None)

    def make(code_hash, answers):
        conn = FakeConn(code_hash, answers)
        monkeypatch.setattr(remote, "connect", lambda host, **_kw: conn)
        return conn

    return make


def test_the_spec_goes_on_one_commands_stdin_and_the_driver_is_uploaded_once_per_version(head):
    tag = engine.code_tag()
    conn = head("0" * 64, [(200, '{"submission_id": "c-1"}')])
    engine.submit(_engine(), "c-1", {"job": "c-1", "items": [[0, "a"]]})
    (cmd, stdin), (mv, _) = conn.cmds
    assert json.loads(stdin) == {"job": "c-1", "items": [[0, "a"]]} and "cat > $HOME/.gpuplan/jobs/c-1/spec.json" in cmd
    code = f"/home/u/.gpuplan/code/{tag}"
    assert [p.rsplit(".", 1)[0] for p in conn.puts] == [f"{code}/ray_driver.py", f"{code}/batch_rules.py"]
    assert mv.count("mv -f") == 2  # each file put in place whole, by a rename
    [req] = conn.requests
    assert req["line"] == "POST /api/jobs/ HTTP/1.1"
    assert req["body"] == {"entrypoint": f'"/opt/ray/bin/python" {code}/ray_driver.py /home/u/.gpuplan/jobs/c-1/spec.json',
                           "submission_id": "c-1", "runtime_env": {}, "metadata": {}}

    # the head has this version whole: nothing is uploaded, one command and the API call
    conn = head(tag + "0" * 48, [(200, "{}")])
    engine.submit(_engine(), "c-2", {"job": "c-2"})
    assert (len(conn.cmds), conn.puts, len(conn.requests)) == (1, [], 1)


def test_the_code_tag_is_what_sha256sum_of_the_files_on_the_head_prints():
    files = [str(engine.HERE / f) for f in engine.CODE_FILES]
    out = subprocess.run(f"cat {' '.join(files)} | sha256sum", shell=True, capture_output=True, text=True, check=True).stdout
    assert out[:16] == engine.code_tag()


def test_the_jobs_api_is_tried_again_while_it_comes_up(head):
    conn = head(engine.code_tag(), [Exception("ChannelException(2, 'Connect failed')"),
                                    (500, "No available agent to submit job, please try again later."), (200, "{}")])
    engine.submit(_engine(), "c-1", {})
    assert len(conn.requests) == 2 and conn.answers == []


def test_a_job_made_by_a_try_whose_answer_was_lost_counts_as_submitted(head):
    head(engine.code_tag(), [(503, "busy"), (500, "ValueError: Job with submission_id c-1 already exists.")])
    engine.submit(_engine(), "c-1", {})
    head(engine.code_tag(), [(500, "ValueError: Job with submission_id c-1 already exists.")])
    with pytest.raises(engine.EngineError, match="Ray already has a job c-1"):
        engine.submit(_engine(), "c-1", {})


def test_a_refused_job_is_not_tried_again(head):
    conn = head(engine.code_tag(), [(400, "TypeError: bad entrypoint"), (200, "{}")])
    with pytest.raises(engine.EngineError, match=r"not submitted \(400\): TypeError: bad entrypoint"):
        engine.submit(_engine(), "c-1", {})
    assert len(conn.answers) == 1


def test_a_warm_cluster_skips_the_playbook_and_any_start_and_its_head_connection_serves_the_submit(monkeypatch):
    from gpuplan.hosts import playbook

    eng = _engine(3)
    monkeypatch.setattr(engine, "engine_of", lambda state, cluster: eng)
    monkeypatch.setattr(engine, "was_started", lambda state, cluster: True)  # no state here: its settings are eng's
    opened: list[tuple[str, FakeConn]] = []

    class Node(FakeConn):
        def run(self, cmd, timeout=600, sudo=False, stdin=None):
            if "dist-info" in cmd:
                return remote.Result(0 if self.name != down else 1, "", "", 0.01)
            return super().run(cmd, timeout, sudo, stdin)

    def connect(host, **_kw):
        conn = Node(engine.code_tag(), [(200, "{}")])
        conn.name = host.name
        opened.append((host.name, conn))
        return conn

    def bootstrap(*_a, **_kw):
        raise AssertionError("bootstrapped")

    monkeypatch.setattr(remote, "connect", connect)
    monkeypatch.setattr(playbook, "bootstrap_cluster", bootstrap)
    down = ""
    assert engine.ensure_up(None, "c") == (eng, {})
    assert sorted(name for name, _ in opened) == ["c-0", "c-1", "c-2"]  # one command per node
    assert [name for name, c in opened if not c.closed] == ["c-0"]  # the head's is kept for the submission
    engine.submit(eng, "c-1", {})
    assert len(opened) == 3 and all(c.closed for _, c in opened)
    head = next(c for name, c in opened if name == "c-0")
    assert len(head.requests) == 1 and "spec.json" in head.cmds[-1][0]
    engine.submit(eng, "c-2", {})  # nothing kept now: a connection of its own
    assert len(opened) == 4
    down = "c-2"  # Ray stopped there: the full path (playbook, starts) runs
    with pytest.raises(AssertionError, match="bootstrapped"):
        engine.ensure_up(None, "c")


def test_a_kept_connection_that_dropped_is_replaced(monkeypatch):
    eng = _engine(1)
    dead = FakeConn(engine.code_tag(), [])

    def broken(*_a, **_kw):
        raise remote.RemoteError("c-0: could not start a command: SSH session not active")

    dead.run = broken
    engine._keep(eng.head.host, dead)
    fresh = FakeConn(engine.code_tag(), [(200, "{}")])
    monkeypatch.setattr(remote, "connect", lambda host, **_kw: fresh)
    engine.submit(eng, "c-1", {})
    assert dead.closed and fresh.closed and len(fresh.requests) == 1


def test_the_warm_check_reads_the_pinned_version_from_pips_record(tmp_path, monkeypatch):
    monkeypatch.setattr(engine, "_running_check", lambda eng, node: "true")
    venv = tmp_path / "ray"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    (venv / "bin" / "python").chmod(0o755)
    eng = engine.Engine("c", _engine(1).nodes, engine.Layout(str(venv), 6380))

    def check() -> int:
        return subprocess.run(["bash", "-c", engine._warm_check(eng, eng.head)]).returncode

    assert check() != 0  # no Ray in it
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "ray-2.59.0.dist-info").mkdir(parents=True)
    assert check() != 0  # another version
    (site / f"ray-{engine.RAY_VERSION}.dist-info").mkdir()
    assert check() == 0
