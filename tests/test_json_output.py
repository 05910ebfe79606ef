"""Issue 33 part 5: `--format json` on every command that prints results. One test per command:
its JSON parses, stands alone on stdout (the words go to stderr), carries the figures the table
shows, and uses the one shape of its noun (docs/json.md). All on the in-process fakes."""

from __future__ import annotations

import json
import threading
from decimal import Decimal

import pytest

from support.sakura_dok_fake import run_the_queue
from support.sakura_phy_fake import PhyFake

CLUSTER_KEYS = {"name", "provider", "region", "instance_type", "count", "status", "owned", "image", "created_at",
                "uptime_s", "machine_seconds", "yen_so_far", "price_jpy_per_hour", "ttl_left_s", "ttl_expires_at",
                "nodes", "user", "project"}
NODE_KEYS = {"name", "status", "public_ip", "private_ip", "ssh_port", "gpus", "id", "created_at"}
JOB_KEYS = {"id", "cluster", "state", "total", "succeeded", "failed", "bad_input", "timed_out", "running", "queued",
            "cancelled", "resumes", "submitted_at", "started_at", "ended_at", "wall_s", "yen", "command", "quarantined",
            "interruptions", "user", "project"}


def _json(r):
    assert r.code == 0, (r.out, r.err)
    return json.loads(r.out)  # stdout holds the JSON alone


def _no_floats(doc, where="") -> None:
    """Money and counts are never floats (wall seconds and profile measures may be)."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            if isinstance(v, float):
                assert k.endswith("_s") or k in ("seconds",), f"{where}.{k} is a float: {v}"
            _no_floats(v, f"{where}.{k}")
    elif isinstance(doc, list):
        for v in doc:
            _no_floats(v, where)




# --- provision, status, teardown, cost-report, image list ----------------------------------------


def test_provision_and_status_print_the_one_cluster_shape(cli, mem):
    made = _json(cli("provision", "--yes", "memory:m1.gpu", "x2", "--name", "demo", "--no-bootstrap", "--ttl", "4h",
                     "--format", "json"))
    assert set(made) == CLUSTER_KEYS and all(set(n) == NODE_KEYS for n in made["nodes"])
    assert (made["name"], made["count"], made["price_jpy_per_hour"], made["owned"]) == ("demo", 2, "100", False)
    assert made["ttl_expires_at"].endswith("+00:00") and 4 * 3600 - 60 < made["ttl_left_s"] <= 4 * 3600
    table = cli("status", "demo").out
    assert "2x memory:m1.gpu in mem-1" in table and "(¥100/h per machine; as listed)" in table  # a test row that says no tax basis
    [listed] = _json(cli("status", "--format", "json"))
    assert set(listed) == CLUSTER_KEYS and listed["nodes"] == made["nodes"] and isinstance(listed["yen_so_far"], int)
    for n in listed["nodes"]:  # the table's addresses
        assert f"{n['public_ip']}:{n['ssh_port']}" in table
    _no_floats(listed)


def test_provision_dry_run_prints_the_order_it_would_create(cli):
    table = cli("provision", "aws:g4dn.xlarge", "x2", "--name", "plan", "--ttl", "4h", "--dry-run")
    order = _json(cli("provision", "aws:g4dn.xlarge", "x2", "--name", "plan", "--ttl", "4h", "--dry-run",
                      "--format", "json"))
    assert order["dry_run"] and order["name"] == "plan" and order["ttl_s"] == 4 * 3600
    [m] = order["machines"]
    assert (m["instance_type"], m["count"], m["gpu"], m["vcpus_per_machine"]) == ("g4dn.xlarge", 2, "T4", 4)
    # the table's "¥91.53/h per machine, ¥183.06/h for the cluster (... tax; listed ¥83.21/h without it)"
    per, fleet = Decimal(m["price_jpy_per_hour"]), Decimal(order["cluster_jpy_per_hour"])
    with_tax = Decimal(m["price_jpy_per_hour_on_basis"])
    assert (order["tax_basis"], m["listed_tax"], with_tax) == ("included", "excluded", per * Decimal("1.1"))
    assert f"¥{with_tax:,.2f}/h per machine, ¥{2 * with_tax:,.2f}/h for the cluster" in table.out and fleet == 2 * per
    assert f"listed ¥{per:,.2f}/h without it" in table.out
    assert order["says"][0] == "would create cluster plan: 2x aws:g4dn.xlarge in us-east-1"
    _no_floats(order)


def test_provision_json_still_needs_yes_without_a_terminal(cli, mem):
    r = cli("provision", "memory:m1.gpu", "x2", "--no-bootstrap", "--format", "json")
    assert r.code == 2 and "rerun with --yes" in r.err and r.out == ""
    assert mem.create_calls == 0


def test_teardown_prints_the_clusters_and_resources_it_deleted(cli, mem):
    cli("provision", "--yes", "memory:m1.gpu", "x2", "--name", "demo", "--no-bootstrap")
    would = _json(cli("teardown", "demo", "--dry-run", "--format", "json"))
    [c] = would["clusters"]
    assert would["dry_run"] and c["deleted"] is None and len(c["machines"]) == 2 and c["cluster_jpy_per_hour"] == "200"
    done = _json(cli("teardown", "--yes", "demo", "--format", "json"))
    [c] = done["clusters"]
    assert not done["dry_run"] and c["name"] == "demo"
    # the table's "deleted 4 resources": 2 instances and their 2 disks
    assert sorted(r["kind"] for r in c["deleted"]) == ["disk", "disk", "instance", "instance"]
    assert all(r["deleted"] and r["cluster"] == "demo" for r in c["deleted"]) and mem.resources == {}


def test_teardown_sweep_prints_what_it_asked_and_found(cli, mem):
    doc = _json(cli("teardown", "--sweep", "--provider", "memory", "--region", "mem-1", "--dry-run", "--format",
                    "json"))
    assert doc["sweep"] == {"asked": ["memory"], "not_asked": [], "resources": [], "kept": []}


def test_cost_report_json_carries_the_tables_total(cli, mem):
    import time

    cli("provision", "--yes", "memory:m1.gpu", "x2", "--name", "demo", "--no-bootstrap")
    time.sleep(1.1)  # the ledger keeps whole seconds
    cli("teardown", "--yes", "demo")
    doc = _json(cli("cost-report", "--format", "json", "--tax", "excluded"))
    [line] = doc["lines"]
    assert (line["cluster"], line["machines"], line["instance_type"]) == ("demo", 2, "m1.gpu")
    total = Decimal(doc["total_jpy"])  # a string Decimal: 2 machines x the 60-s minimum at ¥100/h
    assert total == Decimal("3.33") and line["cost_jpy"] == "3.33"
    table = cli("cost-report", "--tax", "excluded").out
    assert "total: ¥3 " in table
    _no_floats(doc)


def test_image_list_prints_the_image_shape(cli, gpuplan_home):
    from gpuplan.store.state import State

    state = State(gpuplan_home / "state" / "state.db")
    state.add_image("t4-img", "aws", "us-east-1", "g4dn.xlarge", "nvidia-driver,cuda")
    state.close()
    [img] = _json(cli("image", "list", "--format", "json"))
    assert (img["name"], img["provider"], img["region"], img["built_on"]) == ("t4-img", "aws", "us-east-1", "g4dn.xlarge")
    assert img["playbooks"] == ["nvidia-driver", "cuda"] and img["created_at"].endswith("+00:00")
    assert _json(cli("image", "list", "--format", "json")) == [img]
    table = cli("image", "list").out
    assert "t4-img" in table and "g4dn.xlarge" in table


# --- run, jobs, dok status (the DOK fake: conftest's dok_env) ----------------------------------------


def _items(tmp_path, *names) -> str:
    path = tmp_path / "items.txt"
    path.write_text("\n".join(names) + "\n")
    return str(path)


def test_run_detached_prints_the_job_and_jobs_lists_the_same_shape(dok_env, cli, tmp_path):
    r = cli("run", "-y", "dok:h100-80gb", "--image", "img:1", "--items", _items(tmp_path, "a", "b"), "--detach",
            "--format", "json", "--", "work", "{item}")
    job = _json(r)
    assert "job dok-1 submitted" in r.err  # the words on stderr
    assert set(job) == JOB_KEYS and (job["id"], job["cluster"], job["total"]) == ("dok-1", "dok", 2)
    [listed] = _json(cli("jobs", "dok", "--format", "json"))
    assert set(listed) == JOB_KEYS and listed["id"] == "dok-1" and listed["command"] == ["work", "{item}"]


def test_run_followed_prints_the_job_with_its_measured_yen(dok_env, cli, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPLAN_POLL_S", "0.05")
    lengths = iter([30, 600])
    worker = threading.Thread(target=run_the_queue, args=(dok_env, 2, lambda: dok_env.advance(seconds=next(lengths))),
                              daemon=True)
    worker.start()
    r = cli("run", "-y", "dok:h100-80gb", "--image", "img:1", "--items", _items(tmp_path, "x", "y"), "--format",
            "json", "--", "work", "{item}")
    worker.join(5)
    doc = _json(r)
    assert set(doc) == JOB_KEYS | {"measured", "plan", "not_ok", "set_aside"}
    assert doc["succeeded"] == 2 and doc["state"] == "succeeded" and doc["not_ok"] == [] and doc["plan"] is None
    # 60 s (the per-task minimum) + 600 s at ¥1,008/h = ¥184.80; the table says ¥185
    assert doc["measured"]["yen"] == "184.80" and "2 tasks each billed for its own run time" in doc["measured"]["how"]
    assert "measured: wall" in r.err and "¥185 (2 tasks" in r.err  # the table's words, on stderr
    _no_floats(doc)


def test_dok_status_prints_each_task(dok_env, cli, tmp_path):
    cli("dok", "submit", "-y", "--image", "img:1", "--items", _items(tmp_path, "a", "b"), "--run", "r1", "--", "w",
        "{item}")
    dok_env.advance()
    tasks = _json(cli("dok", "status", "--run", "r1", "--format", "json"))
    assert [(t["name"], t["plan"], t["status"]) for t in tasks] == [("r1-0", "h100-80gb", "done"),
                                                                    ("r1-1", "h100-80gb", "running")]
    assert tasks[0]["artifact"] and tasks[0]["finished"] and not tasks[1]["finished"]
    table = cli("dok", "status", "--run", "r1").out
    assert all(t["id"] in table for t in tasks)


# --- phy list (the PHY fake) --------------------------------------------------------------------------


def test_phy_list_prints_each_server(cli, monkeypatch, gpuplan_home):
    fake = PhyFake()
    fake.root = fake.start()
    try:
        fake.add_server("100000000001", "gpu-a", "高火力 PHY H100 80GB x8 (SYS-821GE-TNHR)", "198.51.100.11")
        for k, v in fake.env(fake.root).items():
            monkeypatch.setenv(k, v)
        [s] = _json(cli("phy", "list", "--format", "json"))
        assert (s["id"], s["nickname"], s["instance_type"], s["gpu_count"], s["state"]) == (
            "100000000001", "gpu-a", "phy-h100x8", 8, "ready")
        assert s["address"] == "198.51.100.11"
    finally:
        fake.stop()


# --- bench, check, catalog ----------------------------------------------------------------------------


def test_bench_on_dry_run_prints_the_campaign_and_its_yen(cli):
    args = ("bench", "colorize", "--on", "aws:g4dn.xlarge@us-east-1", "--dry-run")
    table = cli(*args)
    doc = _json(cli(*args, "--format", "json"))
    [o] = doc["offers"]
    assert doc["dry_run"] and o["offer"] == "aws:g4dn.xlarge" and o["region"] == "us-east-1" and doc["profiles"] == []
    total = Decimal(doc["total_jpy"])
    assert f"in all about ¥{total:,.0f}" in table.out and Decimal(o["yen"]) == total
    _no_floats(doc)


def test_bench_local_prints_the_profile(cli, gpuplan_home, monkeypatch):
    """The measuring itself is tests/test_bench_local.py's (torch); here, what is printed of its profile."""
    from gpuplan.measuring import bench
    from gpuplan.planning import profiles

    written = gpuplan_home / "p.json"
    prof = profiles.Profile(workload="colorize", unit="epoch", reference_gpu="T4", gpu_memory_gib=Decimal(16),
                            seconds_per_unit=Decimal("12.5"),
                            provenance=profiles.Provenance(source="gpuplan bench", date="2026-11-26", gpu="Tesla T4"))
    monkeypatch.setattr(bench, "bench", lambda opts, executor, out: (prof, written))
    r = cli("bench", "colorize", "--local", "--format", "json")
    doc = _json(r)
    assert (doc["path"], doc["workload"], doc["reference_gpu"], doc["seconds_per_unit"]) == (str(written), "colorize",
                                                                                             "T4", 12.5)
    assert "alone: 12.5 s per epoch" in r.err  # the table's words, on stderr


def test_check_json_carries_the_quota_figures(moto_aws, gpuplan_home, cli):
    import yaml

    (gpuplan_home / "config").mkdir(parents=True)
    (gpuplan_home / "config" / "config.yaml").write_text(yaml.safe_dump({"providers": {"aws": {"quota_vcpus": "64"}}}))
    [aws] = _json(cli("check", "aws", "--format", "json"))
    g = next(q for q in aws["quotas"] if q["name"] == "L-DB2E81BA")
    assert (g["limit"], g["used"], g["free"]) == (64, 0, 64)
    table = cli("check", "aws").out
    assert "L-DB2E81BA" in table and "64 vCPUs" in table


def test_catalog_json_carries_the_rows_the_table_shows(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    doc = _json(cli("catalog", "--provider", "aws", "--gpu", "t4", "--format", "json"))
    rows = doc["offers"] if isinstance(doc, dict) else doc
    names = {row["name"] for row in rows}
    assert "g4dn.xlarge" in names
    table = cli("catalog", "--provider", "aws", "--gpu", "t4").out
    assert all(n in table for n in names)


# --- one option, one message ----------------------------------------------------------------------------


FORMATTED = [("provision",), ("run",), ("jobs",), ("bench",), ("image", "list"), ("dok", "status"), ("phy", "list"),
             ("teardown",), ("check",), ("status",), ("cost-report",)]


@pytest.mark.parametrize("command", FORMATTED + [("catalog",), ("estimate",)], ids=" ".join)
def test_every_command_takes_one_format_option_with_the_same_help(cli, command, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    r = cli(*command, "--help")
    assert r.code == 0, r.err
    text = " ".join(r.out.replace("│", " ").split())
    csv = command in (("catalog",), ("estimate",))
    aliases = "-o json and --json are --format json."  # issue 46: as SkyPilot's and dstack's users type it
    # -o is read as --format's short name by the command line (shapes.json_alias), not declared: a
    # column of its own narrowed every help page's sentences below 30 characters at 80 columns
    assert (f"--format table|json|csv Print a table (for people), JSON or CSV (for programs); {aliases}" if csv else
            f"--format table|json Print a table (for people) or JSON (for programs); {aliases}") in text, text
    assert "--format TEXT" not in text


@pytest.mark.parametrize("command", FORMATTED, ids=" ".join)
def test_a_bad_format_is_one_line_and_exit_2(cli, command):
    args = {("run",): ("somecluster", "--items", "x"), ("jobs",): ("dok",), ("bench",): ("colorize", "--local"),
            ("teardown",): ("--all",), ("provision",): ("aws:g4dn.xlarge", "x1")}.get(command, ())
    r = cli(*command, *args, "--format", "xml")
    assert r.code == 2 and r.err == "gpuplan: error: bad --format 'xml': use table or json\n", r.err
    assert r.out == ""


def test_docs_json_names_every_field_of_the_shared_shapes():
    from pathlib import Path

    text = (Path(__file__).parents[1] / "docs" / "json.md").read_text()
    missing = sorted(k for k in CLUSTER_KEYS | NODE_KEYS | JOB_KEYS if f"`{k}`" not in text)
    assert not missing, f"docs/json.md does not name {missing}"
