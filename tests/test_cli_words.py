"""Issue 33, "words that contradict": what provision, teardown --sweep, status and a run's summary
say agrees with what happens. Dry runs on the embedded catalog, no credentials, no network."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from gpuplan.errors import AuthMissing
from gpuplan.fleet import provider as registry
from support.memory_provider import MemoryProvider


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    from support.credentials import without_credentials

    without_credentials(monkeypatch, tmp_path)


# --- provision: TTL, idle stop, both, neither -------------------------------------------------


@pytest.mark.parametrize("args, said, unsaid", [
    (["--ttl", "4h"], ["TTL 4:00 h: each machine shuts itself down after that and EC2 terminates it (its root disk"
                        " with it)"], ["no TTL", "idle stop", "stops the machines"]),
    (["--idle", "30m"], ["idle stop: a machine with no batch for 30 min terminates itself",
                         "no TTL: a machine running a batch runs, and bills, until it has been idle 30 min or"
                         " `gpuplan teardown words`"], ["TTL 4"]),
    (["--ttl", "4h", "--idle", "30m"], ["TTL 4:00 h: each machine shuts itself down", "idle stop: a machine with no batch"],
     ["no TTL"]),
    ([], ["no TTL: the machines run, and bill, until `gpuplan teardown words`"], ["idle stop", "TTL 4"]),
])
def test_provision_says_one_true_thing_about_how_long_machines_bill(cli, no_credentials, args, said, unsaid):
    r = cli("provision", "aws:g4dn.xlarge", "x1", "--name", "words", *args, "--dry-run")
    assert r.code == 0, r.err
    for words in said:
        assert words in r.out
    for words in unsaid:
        assert words not in r.out
    assert r.out.count("TTL") == sum("TTL" in w for w in said)  # one line about it, never two that disagree


# --- owned hosts: their power, no vCPUs, released (not billed) until teardown -----------------


def _inventory(home: Path, watts: int | None = 300) -> None:
    host = {"name": "h1", "address": "127.0.0.1", "port": 2222, "gpus": {"model": "Tesla T4", "count": 1},
            "group": "t4", "host_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"}
    if watts is not None:
        host["power_watts"] = watts
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "inventory.yaml").write_text(yaml.safe_dump({"defaults": {"user": "root"}, "hosts": [host]}))


def test_provision_of_owned_hosts_shows_their_power_and_no_rental_bill(cli, gpuplan_home):
    _inventory(gpuplan_home)
    r = cli("provision", "baremetal:t4", "x1", "--name", "own", "--dry-run")
    assert r.code == 0, r.err
    # 300 W x ¥31/kWh (the catalog's power price) = ¥9.30 an hour
    assert "power ¥9.30/h per machine, ¥9.30/h for the cluster" in r.out
    assert "vCPUs" not in r.out and "?/h" not in r.out
    assert "owned hosts: claimed for own until `gpuplan teardown own` releases them" in r.out
    assert "bill" not in r.out.replace("nothing else bills by the hour", "")


def test_provision_of_owned_hosts_without_power_watts_says_power_is_not_counted(cli, gpuplan_home):
    _inventory(gpuplan_home, watts=None)
    r = cli("provision", "baremetal:t4", "x1", "--name", "own", "--dry-run")
    assert r.code == 0, r.err
    assert "power not counted: give the hosts power_watts in the inventory" in r.out and "¥?" not in r.out


def _owned_cluster(gpuplan_home, price: Decimal | None):
    from gpuplan.store.state import State

    state = State(gpuplan_home / "state" / "state.db")
    state.add_cluster("own", "baremetal", "local", "t4", 2, ssh_user="root", price_jpy_per_hour=price, spec={})
    for n in ("own-0", "own-1"):
        state.add_node("own", n, gpus=1)
        state.update_node("own", n, provider_id=f"h-{n}", status="ready", public_ip="127.0.0.1", ssh_port=2222)
        state.ledger_start("own", n, "baremetal", "t4", price or Decimal(0))
    return state


def test_status_of_owned_hosts_shows_their_power_price(cli, gpuplan_home):
    state = _owned_cluster(gpuplan_home, Decimal("9.3"))
    r = cli("status")
    assert r.code == 0, r.err
    head = r.out.splitlines()[0]
    assert "power ≈¥0 so far (¥9.30/h per machine); owned hosts, released by `gpuplan teardown own`" in head
    assert "?/h" not in r.out and "vCPU" not in r.out and "bill" not in r.out
    state.close()


def test_status_of_owned_hosts_without_power_watts_says_so(cli, gpuplan_home):
    state = _owned_cluster(gpuplan_home, None)
    r = cli("status")
    assert r.code == 0, r.err
    assert "power not counted (no power_watts in the inventory)" in r.out and "?/h" not in r.out
    state.close()


def _summary(provider: str, price: Decimal | None):
    from gpuplan.market import billing
    from gpuplan.run.items import JobResult, RunSummary

    jobs = tuple(JobResult(f"j{i}", f"item{i}", "s", "own-0", "ok", 1, 600.0, Path("-")) for i in range(2))
    return RunSummary("own", jobs, 3600.0, 2, price, Path("-"), provider=provider, size="t4",
                      terms=billing.per_second(price or Decimal(0)))


def _printed(summary, predicted=None) -> str:
    from gpuplan.cli import jobs

    out = io.StringIO()
    with redirect_stdout(out):
        jobs._print_summary(summary, predicted)
    return out.getvalue()


def test_a_runs_measured_yen_on_owned_hosts_is_their_power(gpuplan_home):
    text = _printed(_summary("baremetal", Decimal("9.3")),
                    {"wall_s": Decimal(3600), "yen": Decimal("18.6"), "basis": "the plan"})
    # two hosts held an hour at ¥9.30 each: ¥18.60, to the sen
    assert "measured: wall 60 min, ¥18.60 (2 owned hosts' power at ¥9.30/h each)" in text
    assert "yen +0.0%" in text and "n/a" not in text and "?" not in text


def test_a_runs_yen_on_owned_hosts_without_power_watts_says_power_is_not_counted(gpuplan_home):
    text = _printed(_summary("baremetal", None), {"wall_s": Decimal(3600), "yen": Decimal(0), "basis": "the plan"})
    assert "power not counted (no power_watts in the inventory) (owned hosts)" in text
    assert "n/a" not in text and "?" not in text


def test_a_cloud_runs_measured_yen_is_unchanged(gpuplan_home):
    text = _printed(_summary("memory", Decimal(100)))
    assert "measured: wall 60 min, ¥200 (2 nodes x ¥100/h)" in text


# --- teardown --sweep: one summary line; none asked is an error ---------------------------------


class _NoCredentials(MemoryProvider):
    def check_credentials(self) -> None:
        raise AuthMissing(f"no {self.name} credentials: set THEM")


@pytest.fixture
def two_providers(monkeypatch):
    """The sweep's providers: `alpha` and `beta`, neither with credentials unless a test says so."""
    made = {}

    def make(name, cls):
        def build(config):
            p = cls()
            p.name = name
            made[name] = p
            return p
        return build

    monkeypatch.setattr(registry, "available", lambda: ["alpha", "beta"])
    registry.override("alpha", make("alpha", _NoCredentials))
    registry.override("beta", make("beta", _NoCredentials))
    yield lambda name: registry.override(name, make(name, MemoryProvider))
    registry.override("alpha", None)
    registry.override("beta", None)


def test_a_sweep_that_could_ask_no_provider_says_so_and_fails(cli, two_providers):
    r = cli("teardown", "--sweep", "--dry-run")
    assert r.code == 2, (r.out, r.err)
    assert "sweep: skipping alpha: no alpha credentials" in r.err and "sweep: skipping beta" in r.err
    last = r.err.strip().splitlines()[-1]
    assert last.startswith("gpuplan: error: sweep --dry-run asked no provider: alpha, beta could not be asked")
    assert "nothing was looked for" in last and "gpuplan check" in last


def test_a_sweep_ends_with_one_summary_line(cli, two_providers):
    two_providers("beta")  # beta has credentials; alpha has none
    r = cli("teardown", "--sweep", "--dry-run", "--region", "mem-1")
    assert r.code == 0, r.err
    assert r.out.strip().splitlines()[-1] == ("sweep: asked beta; 0 stray resources found, none deleted (dry run);"
                                              " not asked: alpha (see the lines above)")


def test_a_sweep_of_every_provider_says_every_one_was_asked(cli, two_providers):
    two_providers("alpha")
    two_providers("beta")
    r = cli("teardown", "--sweep", "--yes", "--region", "mem-1")
    assert r.code == 0, r.err
    assert r.out.strip().splitlines()[-1] == ("sweep: asked alpha, beta; 0 stray resources found, 0 deleted;"
                                              " every provider asked")
