"""gpuplan's own bookkeeping around provider calls: journal, rollback, resume, sweep.
Against an in-memory provider; the clouds' own behaviour is tested against their stand-ins.
The `state` tests run on both stores (SQLite, and PostgreSQL: support/postgres.py); those
that lose the SQLite file (the installation id kept beside it) on SQLite only."""

from datetime import date, timedelta
from decimal import Decimal

import pytest

from gpuplan.errors import AuthMissing, ProviderError, QuotaExceeded, RetiredType
from gpuplan.fleet import lifecycle
from gpuplan.planning.types import Offer
from gpuplan.store.state import State
from support.memory_provider import MemoryProvider


def offer(**kw) -> Offer:
    base = dict(
        provider="memory", name="m1.gpu", aliases=("m1",), region="mem-1", gpu="T4", gpu_count=1,
        gpu_memory_gib=Decimal(16), vcpus=4, ram_gib=Decimal(16), price=Decimal("100"), currency="JPY",
        price_unit="hour", price_jpy_per_hour=Decimal("100"), billing_granularity_s=1, billing_minimum_s=60,
        quota_family="memoryFamily", available_from=None, retired_on=None, successor="",
    )
    base.update(kw)
    return Offer(**base)


@pytest.fixture
def state(gpuplan_home, store):
    s = State(gpuplan_home / "state" / "state.db", url=store)
    yield s
    s.close()


@pytest.fixture
def sqlite_state(gpuplan_home):
    s = State(gpuplan_home / "state" / "state.db")
    yield s
    s.close()


def test_provision_four_records_nodes_pins_keys_and_opens_the_ledger(state):
    prov = MemoryProvider()
    req = lifecycle.request_from_offer(offer(), 4, name="demo")
    c = lifecycle.provision(state, prov, req)
    assert c.status == "ready"
    nodes = state.nodes("demo")
    assert [n.name for n in nodes] == ["demo-0", "demo-1", "demo-2", "demo-3"]
    assert all(n.status == "running" and n.public_ip for n in nodes)
    # every node's generated host key is pinned under its address before any SSH
    for n in nodes:
        assert state.host_key(n.public_ip, 22).startswith("ssh-ed25519 ")
    assert len(state.known_hosts_lines()) == 4
    key_path, public = state.ssh_key("demo")
    assert key_path.stat().st_mode & 0o777 == 0o600
    assert public.startswith("ssh-ed25519 ")
    # intent then outcome, for each cloud call
    ops = [(j.op, j.phase) for j in state.journal("demo")]
    assert ops == [("create-nodes", "ok"), ("wait-ready", "ok")]
    # ledger: 4 machines at ¥100/h for one hour = ¥400
    at = state.cluster("demo").created_at + timedelta(hours=1)
    seconds, yen = state.ledger_seconds_and_yen("demo", at)
    assert 4 * 3600 - 20 <= seconds <= 4 * 3600
    assert abs(yen - Decimal(400)) < 1


def test_provision_same_name_twice_is_refused_and_creates_nothing_more(state):
    prov = MemoryProvider()
    lifecycle.provision(state, prov, lifecycle.request_from_offer(offer(), 2, name="demo"))
    with pytest.raises(Exception, match="already exists"):
        lifecycle.provision(state, prov, lifecycle.request_from_offer(offer(), 2, name="demo"))
    assert prov.create_calls == 2


def test_third_of_four_creates_failing_rolls_back_and_journals_it(state):
    prov = MemoryProvider(fail_create_at=3)
    with pytest.raises(ProviderError, match="nothing was left running: the 2 machine"):
        lifecycle.provision(state, prov, lifecycle.request_from_offer(offer(), 4, name="demo"))
    assert prov.resources == {}
    assert state.cluster("demo").status == "gone"
    journal = [(j.op, j.phase) for j in state.journal("demo")]
    assert journal[0] == ("create-nodes", "failed")
    assert "injected" in state.journal("demo")[0].detail
    assert ("delete-instances", "ok") in journal and ("delete-resources", "ok") in journal
    assert journal[-1] == ("verify-gone", "ok")


def test_third_create_failing_with_keep_leaves_two_for_teardown(state):
    prov = MemoryProvider(fail_create_at=3)
    with pytest.raises(ProviderError, match="2 of 4 machines were created and kept"):
        lifecycle.provision(state, prov, lifecycle.request_from_offer(offer(), 4, name="demo"), keep_on_failure=True)
    assert sum(r.kind == "instance" for r in prov.resources.values()) == 2
    assert state.cluster("demo").status == "failed"
    known = {n.name: n.provider_id for n in state.nodes("demo") if n.provider_id}
    assert set(known) == {"demo-0", "demo-1"}
    lifecycle.teardown(state, prov, "demo")
    assert prov.resources == {}


def test_failed_provision_resumes_with_the_same_names(state):
    prov = MemoryProvider(fail_create_at=3)
    req = lifecycle.request_from_offer(offer(), 4, name="demo")
    with pytest.raises(ProviderError):
        lifecycle.provision(state, prov, req, keep_on_failure=True)
    c = lifecycle.provision(state, prov, req)
    assert c.status == "ready"
    assert sum(r.kind == "instance" for r in prov.resources.values()) == 4
    assert prov.create_calls == 5  # 2 ok + 1 failed, then only the 2 missing


def test_teardown_interrupted_half_way_finishes_when_run_again(state):
    prov = MemoryProvider()
    lifecycle.provision(state, prov, lifecycle.request_from_offer(offer(), 4, name="demo"))
    prov.fail_delete_after = 3
    with pytest.raises(ProviderError, match="interrupted"):
        lifecycle.teardown(state, prov, "demo")
    assert state.cluster("demo").status == "tearing-down"
    assert sum(r.kind == "instance" for r in prov.resources.values()) == 1  # 3 of 4 machines deleted
    assert sum(r.kind == "disk" for r in prov.resources.values()) == 4
    lifecycle.teardown(state, prov, "demo")
    assert prov.resources == {}
    assert state.cluster("demo").status == "gone"
    assert all(n.status == "deleted" for n in state.nodes("demo", include_deleted=True))
    assert state.known_hosts_lines() == []


def test_quota_exceeded_names_the_quota_and_creates_nothing(state):
    prov = MemoryProvider(vcpus=6, quota_limit=20)
    with pytest.raises(QuotaExceeded, match=r"needs 24 vCPUs of quota 'memoryFamily'.*only 20 are free.*ask nicely"):
        lifecycle.provision(state, prov, lifecycle.request_from_offer(offer(), 4, name="demo"))
    assert prov.resources == {} and state.cluster("demo") is None


def test_missing_credentials_create_nothing(state):
    prov = MemoryProvider(credentials=False)
    with pytest.raises(AuthMissing, match="MEMORY_TOKEN"):
        lifecycle.provision(state, prov, lifecycle.request_from_offer(offer(), 1, name="demo"))
    assert state.cluster("demo") is None


def test_retired_size_is_refused_with_its_successor():
    with pytest.raises(RetiredType, match=r"retired on 2023-09-06; use Standard_NC4as_T4_v3 instead"):
        lifecycle.request_from_offer(
            offer(provider="azure", name="Standard_NC6", retired_on=date(2023, 9, 6), successor="Standard_NC4as_T4_v3"),
            1,
        )


def lose_the_database(state, gpuplan_home) -> State:
    """The state database file is lost (the installation id file beside it is not)."""
    state.close()
    for suffix in ("", "-wal", "-shm"):
        (gpuplan_home / "state" / f"state.db{suffix}").unlink(missing_ok=True)
    return State(gpuplan_home / "state" / "state.db")


def sweep(state, prov, regions, include_images=False, grace_s=0):
    plan = lifecycle.sweep_find(state, prov, regions, lifecycle.sweep_owners(state), include_images, grace_s)
    return lifecycle.sweep_delete(state, prov, plan.strays), plan


def test_sweep_finds_what_a_lost_state_forgot(sqlite_state, gpuplan_home):
    state = sqlite_state
    prov = MemoryProvider()
    lifecycle.provision(state, prov, lifecycle.request_from_offer(offer(), 2, name="demo"))
    prov.capture_image("mem-1", "i-1", "img", {"gpuplan-owner": lifecycle.owner(state), "gpuplan-image": "img"})
    fresh = lose_the_database(state, gpuplan_home)
    result, _ = sweep(fresh, prov, lifecycle.sweep_regions(fresh, prov))
    assert sorted(r.kind for r in result.deleted) == ["disk", "disk", "instance", "instance"]
    assert [r.kind for r in prov.resources.values()] == ["image"]  # images are kept without --images
    sweep(fresh, prov, ["mem-1"], include_images=True)
    assert prov.resources == {}
    fresh.close()


def test_sweep_leaves_clusters_the_state_knows(state):
    prov = MemoryProvider()
    lifecycle.provision(state, prov, lifecycle.request_from_offer(offer(), 2, name="demo"))
    result, plan = sweep(state, prov, ["mem-1"])
    assert plan.strays == [] and result.deleted == []
    assert len(prov.resources) == 4


def test_sweep_spares_young_resources_unless_forced(sqlite_state, gpuplan_home):
    state = sqlite_state
    prov = MemoryProvider()
    lifecycle.provision(state, prov, lifecycle.request_from_offer(offer(), 2, name="demo"))
    fresh = lose_the_database(state, gpuplan_home)
    result, plan = sweep(fresh, prov, ["mem-1"], grace_s=lifecycle.GRACE_S)
    assert result.deleted == [] and len(prov.resources) == 4
    assert len(plan.spared) == 4 and all("grace period" in why for _, why in plan.spared)
    result, _ = sweep(fresh, prov, ["mem-1"], grace_s=0)  # --force
    assert len(result.deleted) == 4 and prov.resources == {}
    fresh.close()


def test_sweep_rechecks_each_cluster_under_its_lock_before_deleting(sqlite_state, gpuplan_home):
    state = sqlite_state
    from gpuplan.fleet import locks

    prov = MemoryProvider()
    lifecycle.provision(state, prov, lifecycle.request_from_offer(offer(), 2, name="demo"))
    fresh = lose_the_database(state, gpuplan_home)
    plan = lifecycle.sweep_find(fresh, prov, ["mem-1"], lifecycle.sweep_owners(fresh), grace_s=0)
    assert len(plan.strays) == 4
    with locks.cluster("demo"):  # a command holds the cluster between the listing and the delete
        import threading

        out = []
        t = threading.Thread(target=lambda: out.append(lifecycle.sweep_delete(fresh, prov, plan.strays)))
        t.start()
        t.join()
    assert out[0].deleted == [] and len(prov.resources) == 4
    assert all("is busy" in why and "holds its lock" in why for _, why in out[0].spared)
    # the state learns of the cluster between the listing and the delete: spared too
    fresh.add_cluster("demo", "memory", "mem-1", "m1.gpu", 2)
    result = lifecycle.sweep_delete(fresh, prov, plan.strays)
    assert result.deleted == [] and all("now knows cluster demo" in why for _, why in result.spared)
    assert len(prov.resources) == 4
    fresh.close()


def test_owner_is_per_installation_and_kept(sqlite_state, gpuplan_home, monkeypatch):
    state = sqlite_state
    from gpuplan import config

    mine = lifecycle.owner(state)
    assert mine.startswith(config.legacy_owner()[:50] + "-") and len(mine) <= 63
    fresh = lose_the_database(state, gpuplan_home)
    assert lifecycle.owner(fresh) == mine  # the id file beside the database keeps it
    other = State(gpuplan_home / "other-home" / "state.db")
    assert lifecycle.owner(other) != mine
    other.close()
    fresh.close()


def test_resumed_provision_injects_the_same_host_keys(state):
    prov = MemoryProvider(fail_create_at=3)
    seen = []
    real_create = prov.create
    prov.create = lambda spec, names: seen.append(dict(spec.host_keys)) or real_create(spec, names)
    req = lifecycle.request_from_offer(offer(), 4, name="demo")
    with pytest.raises(ProviderError):
        lifecycle.provision(state, prov, req, keep_on_failure=True)
    lifecycle.provision(state, prov, req)
    assert seen[0]["demo-0"].public_openssh == seen[1]["demo-0"].public_openssh
    node = state.nodes("demo")[0]
    assert state.host_key(node.public_ip, 22) == seen[0]["demo-0"].public_openssh
    key_file = state.ssh_key("demo")[0].parent / "demo.hostkeys" / "demo-0"
    assert key_file.stat().st_mode & 0o777 == 0o600
