"""The RunBackend contract (run/backends.py), one suite every registered backend passes
(issue 41): submit, follow, outputs, logs, cancel, the cap, recover or a one-line refusal, and an
option it does not support refused in one line before anything is sent. Run for

- a toy backend registered from tests/ through the entry-point group, as a third party's would
  be (a *.dist-info with entry_points.txt in a folder put on sys.path; tests/support/toy_backend.py);
- DOK, against its fake (tests/support/sakura_dok_fake.py), each task's command really run here;
- Ray, on two loopback sshd hosts (one cluster shared by the suite's cases);
- Slurm, on real daemons (tests/support/slurm.py) through a loopback login host.

Each harness gives a backend its target and makes time pass where it runs; the cases ask only
the contract and the batch service (backends.submit, batches.follow, backends.summary / outputs
/ cancel / yen)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.errors import UsageError
from gpuplan.run import backends, batches, caps
from gpuplan.run import items as run_items

COMMAND = ("sh", "-c", 'echo "done $1" > "$GPUPLAN_OUTPUT_DIR/r.txt"; echo "log $1"', "x", "{item}")
SLOW = ("sh", "-c", "sleep 60; : {item}")


@dataclass
class Harness:
    name: str
    target: str
    state: Any
    base: dict = field(default_factory=dict)  # what every submission there needs (DOK: an image)
    offer: Any = None  # an offer this backend serves (the cap's time limit)
    drive: Callable[[int], None] = lambda _n: None  # time passes where `n` items run
    where: str = ""  # what its jobs are listed under

    @property
    def backend(self):
        return backends.get(self.name)

    def sub(self, items, command=COMMAND, **kw) -> backends.Submission:
        return backends.Submission(target=self.target, items=tuple(items), command=tuple(command), outputs_env=True,
                                   **{**self.base, **kw})


# --- the harnesses -------------------------------------------------------------------------------


def _toy(tmp_path: Path, monkeypatch, gpuplan_home) -> Harness:
    dist = tmp_path / "plugins" / "gpuplan_toy_backend-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: gpuplan-toy-backend\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[gpuplan.run_backends]\ntoy = support.toy_backend:ToyBackend\n")
    monkeypatch.syspath_prepend(str(dist.parent))
    monkeypatch.setenv("GPUPLAN_TOY_DIR", str(tmp_path / "toy"))
    from gpuplan.store.state import State

    return Harness("toy", "toy", State.open_default(), where="toy")


def _dok(monkeypatch, gpuplan_home, request) -> Harness:
    from contextlib import ExitStack

    from gpuplan.market import catalog
    from gpuplan.store.state import State
    from support.sakura_dok_fake import run_the_queue, serving

    stack = ExitStack()
    request.addfinalizer(stack.close)
    fake = stack.enter_context(serving(monkeypatch, execute=True))

    def drive(n: int) -> None:
        threading.Thread(target=run_the_queue, args=(fake, n, lambda: fake.advance(seconds=30)), daemon=True).start()

    offer = catalog.load().resolve_named("sakura:dok-h100-80gb")[0]
    h = Harness("dok", "h100-80gb", State.open_default(), base={"image": "img:1", "timeout_s": 3600}, offer=offer,
                drive=drive, where="dok")
    h.fake = fake  # type: ignore[attr-defined]
    return h


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    from support.ray_env import loopback_ray_cluster
    from support.sshd import missing_prerequisite

    if missing_prerequisite():
        pytest.skip(missing_prerequisite())
    with loopback_ray_cluster(tmp_path_factory.mktemp("contract-ray"), "ctr", Decimal(360), gpus=1) as running:
        yield running


def _ray(request) -> Harness:
    state, _hosts, _home = request.getfixturevalue("ray_cluster")
    return Harness("ray", "ctr", state, where="ctr")


@pytest.fixture(scope="module")
def slurm_cluster():
    from support.slurm import start_cluster
    from support.sshd import start_hosts, stop_hosts

    cluster = start_cluster(gpus=2)
    hosts = start_hosts(1)
    try:
        yield cluster, hosts[0]
    finally:
        stop_hosts(hosts)
        cluster.stop()


def _slurm(request, monkeypatch, gpuplan_home) -> Harness:
    from gpuplan import paths
    from gpuplan.providers import slurm
    from gpuplan.store.state import State

    cluster, login = request.getfixturevalue("slurm_cluster")
    monkeypatch.setenv("GPUPLAN_POLL_S", "1")
    paths.config_dir().mkdir(parents=True, exist_ok=True)
    (paths.config_dir() / "slurm.yaml").write_text(yaml.safe_dump({"clusters": [{
        "name": "lab", "queue_wait": "1m", "env": cluster.env, "workdir": "gpuplan-batches",
        "login": {"address": login.host, "port": login.port, "user": login.user, "key": str(login.client_key_path),
                  "host_key": login.host_public_key},
        "cost": {"points_per_gpu_hour": 2, "yen_per_point": 15},
        "partitions": [{"name": cluster.partition, "gpu": "V100", "gpus_per_node": cluster.gpus, "nodes": 1}]}]}))
    request.addfinalizer(lambda: _slurm_queue_empty(cluster))
    return Harness("slurm", f"slurm:lab/{cluster.partition}", State.open_default(),
                   offer=slurm.offer_of(f"lab.{cluster.partition}"), where="slurm")


def _slurm_queue_empty(cluster) -> None:
    assert cluster.queue() == []  # every case leaves the queue empty


@pytest.fixture(params=["toy", "dok", pytest.param("ray", marks=pytest.mark.sshd),
                        pytest.param("slurm", marks=pytest.mark.sshd)])
def h(request, tmp_path, monkeypatch):
    if request.param == "ray":
        return _ray(request)
    gpuplan_home = request.getfixturevalue("gpuplan_home")
    if request.param == "toy":
        return _toy(tmp_path, monkeypatch, gpuplan_home)
    if request.param == "dok":
        return _dok(monkeypatch, gpuplan_home, request)
    return _slurm(request, monkeypatch, gpuplan_home)


def _follow(h: Harness, job: str):
    return batches.follow(h.state, job, lambda _row, _p: None, every_s=0.1 if h.name in ("toy", "dok") else None)


# --- the suite ---------------------------------------------------------------------------------


def test_it_is_registered_and_named_by_its_target(h):
    assert backends.registered()[h.name] is h.backend
    assert backends.for_target(h.where if h.backend.pseudo_clusters else h.target).name == h.name
    assert set(h.backend.supports) <= set(backends.OPTIONS)
    assert h.backend.refusal and "\n" not in h.backend.refusal


def test_a_batch_is_submitted_followed_and_its_outputs_and_logs_come_back(h, tmp_path):
    items = [(0, "a"), (1, "b")]
    job = backends.submit(h.state, h.backend, h.sub(items), lambda _m: None)
    assert backends.job_row(h.state, job).backend == h.name and backends.of(backends.job_row(h.state, job)) is h.backend
    h.drive(2)
    row = _follow(h, job)
    assert row.state == "succeeded"
    summary = backends.summary(h.state, job)
    assert sorted((j.item, j.status) for j in summary.jobs) == [("a", "ok"), ("b", "ok")]
    assert isinstance(backends.yen(h.state, row), Decimal) and backends.yen(h.state, row) >= 0
    got = backends.outputs(h.state, job, tmp_path / "out")
    assert got.items == 2 and got.files >= 2
    written: list[str] = []
    notes: list[str] = []
    try:
        h.backend.logs(h.state, job, "a", False, written.append, notes.append)
    except UsageError as exc:  # DOK: an ended task's log is in its artifact, fetched above
        notes.append(str(exc))
    # the item's log, or one line saying where it is
    assert "log a" in "".join(written) or (len(notes) == 1 and "\n" not in notes[0])


def test_a_cancelled_batch_ends_with_nothing_left_running(h, request):
    job = backends.submit(h.state, h.backend, h.sub([(0, "a"), (1, "b")], SLOW), lambda _m: None)
    if h.name == "ray":  # the driver has started the items
        import time

        end = time.monotonic() + 120
        while backends.refresh(h.state, job).state == "submitted" and time.monotonic() < end:
            time.sleep(0.3)
    stopped = backends.cancel(h.state, job)
    assert stopped >= 0
    run_items.record_finished(h.state, job)
    row = backends.refresh(h.state, job)
    assert row.state in run_items.JOB_STATES_OVER and row.state != "succeeded"
    counts = h.state.job_counts(job)
    assert counts.get("running", 0) == 0 and counts.get("ok", 0) == 0
    if h.name == "dok":
        assert all(t["status"] == "canceled" for t in h.fake.tasks.values())


def test_the_cap_is_held_where_it_runs_or_bounds_each_items_time(h):
    """A backend that stops a batch at a moment (CAP) is given the cap's; one that cannot is
    refused a cap in one line, and bounds each item's time by what the cap buys instead."""
    from gpuplan.store.state import now

    if backends.CAP in h.backend.supports:
        cap = caps.Cap.on(Decimal(1000)).at(now() + timedelta(seconds=8))
        job = backends.submit(h.state, h.backend, h.sub([(0, "a"), (1, "b")], SLOW, cap=cap), lambda _m: None)
        row = _follow(h, job)
        assert row.state == "capped"
        assert h.state.job_counts(job).get("ok", 0) == 0
        return
    with pytest.raises(backends.Unsupported) as refused:
        backends.submit(h.state, h.backend, h.sub([(0, "a")], cap=caps.Cap.on(Decimal(100))), lambda _m: None)
    assert "\n" not in str(refused.value) and h.backend.refusal in str(refused.value)
    if h.offer is not None:
        limit = h.backend.time_limit_within(h.offer, Decimal(1), 24 * 3600)
        assert 0 < limit < 24 * 3600  # ¥1 buys less than a day on a priced offer


def test_recover_is_honoured_or_refused_in_one_line(h):
    sub = h.sub([(0, "a")], recover=True)
    if backends.RECOVER in h.backend.supports:
        backends.check(h.backend, sub)  # accepted; the whole replacement: tests/test_launch_recover.py
        return
    with pytest.raises(backends.Unsupported) as refused:
        backends.check(h.backend, sub, {backends.RECOVER: "--recover"})
    line = str(refused.value)
    assert "\n" not in line and line.startswith(h.backend.refusal) and "--recover does not apply" in line
    assert isinstance(refused.value, UsageError) and refused.value.exit_code == 2


UNSUPPORTED = {
    backends.RECOVER: {"recover": True}, backends.WORKDIR: {"node_workdir": "/srv/code"},
    backends.TORCHRUN: {"torchrun": backends.Torchrun()}, backends.PER_GPU: {"per_gpu": 2},
    backends.RETRIES: {"retries": 1}, backends.CHECKPOINTS: {"checkpoint_every_s": 600},
    backends.CAP: {"cap": caps.Cap.on(Decimal(100))}, backends.IMAGE: {"image": "img:2"},
    backends.REGISTRY_ID: {"registry_id": "0a1b2c3d"},
}


def test_an_option_it_does_not_support_is_refused_in_one_line_before_anything_is_sent(h):
    option = next(o for o in UNSUPPORTED if o not in h.backend.supports)
    before = len(h.state.jobs(h.where))
    sent = len(h.fake.requests) if h.name == "dok" else 0
    with pytest.raises(backends.Unsupported) as refused:
        backends.submit(h.state, h.backend, h.sub([(0, "a")], **UNSUPPORTED[option]), lambda _m: None)
    assert "\n" not in str(refused.value) and f"{option} does not apply" in str(refused.value)
    assert len(h.state.jobs(h.where)) == before  # nothing recorded
    if h.name == "dok":
        assert len(h.fake.requests) == sent  # nothing sent


def test_the_contract_is_each_backends_whole_surface():
    """The built-ins declare every attribute the contract names (a toy one is held to it above)."""
    names = [n for n in backends.RunBackend.__dict__ if not n.startswith("_")] + list(
        backends.RunBackend.__annotations__)
    for b in backends.registered().values():
        missing = [n for n in names if not hasattr(b, n)]
        assert missing == [], f"{b.name} lacks {missing}"


def test_submission_asks_for_each_option_it_sets():
    base = backends.Submission(target="t", items=((0, "a"),), command=("echo", "{item}"))
    assert base.asks() == ()
    for option, kw in UNSUPPORTED.items():
        assert replace(base, **kw).asks() == (option,)


def test_check_runs_each_backends_own_validation_before_anything_is_read(cli, gpuplan_home):
    """What a backend supports may still be bad input there: check() (and so backends.submit and
    `gpuplan run` before it opens the state) lets the backend say so in one line (RunBackend.validate):
    a --torchrun command torchrun cannot start on Ray, a task time limit DOK does not take."""
    torch = backends.Submission(target="c", items=(), command=("torchrun", "train.py"), torchrun=backends.Torchrun())
    with pytest.raises(UsageError) as refused:
        backends.check(backends.get("ray"), torch)
    assert "gpuplan adds torchrun" in str(refused.value) and "\n" not in str(refused.value)
    short = backends.Submission(target="h100-80gb", items=((0, "a"),), command=("echo", "{item}"), image="img:1",
                                timeout_s=60)
    with pytest.raises(UsageError) as refused:
        backends.check(backends.get("dok"), short)
    assert "at least 600 s" in str(refused.value)
    r = cli("run", "demo", "--torchrun", "--", "torchrun", "train.py")  # no cluster demo: refused before it is looked for
    assert r.code == 2 and "gpuplan adds torchrun" in r.err and "no cluster" not in r.err
    assert not (gpuplan_home / "state").exists() or not list((gpuplan_home / "state").iterdir())


def test_an_entry_point_that_does_not_load_is_one_line_saying_to_reinstall(tmp_path, monkeypatch):
    """An editable install keeps the entry points it was installed with: one whose adapter moved
    is said in one line with what to do, not a traceback from every command."""
    dist = tmp_path / "plugins" / "gpuplan_stale-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: gpuplan-stale\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[gpuplan.run_backends]\nstale = gpuplan.run.backends:GoneBackend\n")
    monkeypatch.syspath_prepend(str(dist.parent))
    with pytest.raises(UsageError) as refused:
        backends.registered()
    assert "stale = gpuplan.run.backends:GoneBackend does not load" in str(refused.value)
    assert "pip install -e ." in str(refused.value) and "\n" not in str(refused.value)


def test_the_cli_reaches_a_backend_only_through_the_contract(cli, tmp_path, monkeypatch):
    """`gpuplan run` and `gpuplan dashboard` ask the backend a target names (tests/test_layout.py:
    the CLI imports no backend's module): a private registry's password that is not set is one
    line before anything starts; a backend without a dashboard says so in one line."""
    items = tmp_path / "items.txt"
    items.write_text("a\n")
    monkeypatch.delenv("GPUPLAN_TEST_NO_SUCH_TOKEN", raising=False)
    r = cli("run", "demo", "--items", str(items), "--image", "ghcr.io/me/x:1", "--registry-user", "bob",
            "--registry-password-env", "GPUPLAN_TEST_NO_SUCH_TOKEN", "--", "echo", "{item}")
    assert r.code == 2 and "GPUPLAN_TEST_NO_SUCH_TOKEN is not set" in r.err and "no cluster" not in r.err
    for target, says in (("dok", "has no cluster and no dashboard"), ("slurm", "has no gpuplan dashboard"),
                         ("nosuch", "no cluster named 'nosuch'")):
        r = cli("dashboard", target, "--port", "0")
        assert r.code == 2 and says in r.err and len(r.err.strip().splitlines()) == 1, r.err
