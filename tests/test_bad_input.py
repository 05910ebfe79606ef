"""Every bad input gets one line on stderr naming the culprit, and exit code 2: never a
traceback, never "unexpected error", never a hang, never silently accepted.

Each case runs through the real CLI entry point (gpuplan.cli.main, in-process) in a fresh
GPUPLAN_HOME. Files a case needs are written first: `{tmp}` in a path or argument is the
test's tmp_path, `{home}` its GPUPLAN_HOME.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

BINARY = bytes(range(256)) * 8  # NUL bytes and everything else
LATIN1 = "name: café\n".encode("latin-1")  # text, but not UTF-8
WORKLOAD = "name: x\nseconds_per_unit: 1\nreference_gpu: K80\njobs:\n  - {units: 10}\n"
PLAN = {"provider": "aws", "instance_type": "g4dn.xlarge", "count": 2}
# about 300 bytes that a plain YAML loader expands to 9**9 items (past 4 GB)
ALIAS_BOMB = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{','.join('*' + chr(97 + i) for _ in range(9))}]\n" for i in range(8))
INVENTORY = "hosts:\n- {name: h1, address: 127.0.0.1, HOST, group: t4}\n"  # HOST: port and gpus
T4 = "gpus: {model: T4, count: 1}"
INV_CONFIG = "providers:\n  baremetal: {inventory: {tmp}/inv.yaml}\n"
FIFO = object()  # a named pipe: reading it would block forever


def _workload(**fields) -> str:
    """WORKLOAD with some top-level fields replaced (YAML flow text as values)."""
    base = {"name": "x", "seconds_per_unit": "1", "reference_gpu": "K80", "jobs": "[{units: 10}]"}
    base.update(fields)
    return "".join(f"{k}: {v}\n" for k, v in base.items())


def _plan(**fields) -> str:
    return json.dumps({**PLAN, **fields})


BATCH = "items: items.txt\ncommand: echo {item}\nworkload: colorize-hd\n"
PROFILE = "workload: colorize\nunit: epoch\nreference_gpu: T4\nseconds_per_unit: 1\nprovenance: {source: me, date: 2026-11-01}\n"
RUN = ["run", "demo", "--items", "{tmp}/items.txt"]
ITEMS = {"items.txt": "a.mp4\n"}
DRY = ["--dry-run"]

# (id, files to write, argv, a word of the message that names the culprit)
CASES = [
    # --- files that are not what they should be ---------------------------------------------
    ("workload-binary", {"w.yaml": BINARY}, ["estimate", "--workload", "{tmp}/w.yaml"], "workload file"),
    ("workload-binary-no-suffix", {"w": BINARY}, ["estimate", "--workload", "{tmp}/w"], "workload file"),
    ("workload-latin1", {"w.yaml": LATIN1}, ["estimate", "--workload", "{tmp}/w.yaml"], "not UTF-8"),
    ("workload-utf16", {"w.yaml": WORKLOAD.encode("utf-16")}, ["estimate", "--workload", "{tmp}/w.yaml"], "w.yaml"),
    ("workload-directory", {"w.yaml/": None}, ["estimate", "--workload", "{tmp}/w.yaml"], "directory"),
    ("profile-binary", {"p.yaml": BINARY}, ["estimate", "--videos", "4", "--profile", "{tmp}/p.yaml"], "profile"),
    ("prices-binary", {"{home}/config/prices.yaml": BINARY}, ["estimate", "--videos", "4"], "prices file"),
    ("prices-directory", {"{home}/config/prices.yaml/": None}, ["catalog"], "prices file"),
    ("config-binary", {"{home}/config/config.yaml": BINARY}, ["provision", "baremetal:t4", "x1", *DRY], "config file"),
    ("config-directory", {"{home}/config/config.yaml/": None}, ["provision", "baremetal:t4", "x1", *DRY],
     "config file"),
    ("config-providers-list", {"{home}/config/config.yaml": "providers: [aws, azure]\n"},
     ["provision", "baremetal:t4", "x1", *DRY], "providers"),
    ("inventory-binary", {"inv.yaml": BINARY, "{home}/config/config.yaml": "providers:\n  baremetal: {inventory: {tmp}/inv.yaml}\n"},
     ["provision", "baremetal:t4", "x1", *DRY], "inventory"),
    ("plan-binary", {"plan.json": BINARY}, ["provision", "--plan", "{tmp}/plan.json", *DRY], "plan file"),
    ("plan-directory", {"plan.json/": None}, ["provision", "--plan", "{tmp}/plan.json", *DRY], "directory"),
    ("items-binary", {"items.txt": BINARY}, RUN + ["--", "echo", "{item}"], "items file"),
    ("items-directory", {"items.txt/": None}, RUN + ["--", "echo", "{item}"], "items file"),
    ("run-plan-binary", {**ITEMS, "plan.json": BINARY}, RUN + ["--plan", "{tmp}/plan.json", "--", "echo", "{item}"],
     "plan file"),
    ("playbook-binary", {"pb.yaml": BINARY}, ["bootstrap", "demo", "--dry-run", "-p", "{tmp}/pb.yaml"], "playbook file"),
    # --- plan JSON that is JSON but not a plan -------------------------------------------------
    ("plan-list", {"p.json": "[1, 2]"}, ["provision", "--plan", "{tmp}/p.json", *DRY], "JSON object"),
    ("plan-number", {"p.json": "42"}, ["provision", "--plan", "{tmp}/p.json", *DRY], "JSON object"),
    ("plan-null", {"p.json": "null"}, ["provision", "--plan", "{tmp}/p.json", *DRY], "JSON object"),
    ("plan-recommended-list", {"p.json": '{"recommended": [1]}'}, ["provision", "--plan", "{tmp}/p.json", *DRY],
     "JSON object"),
    ("plan-count-string", {"p.json": _plan(count="2")}, ["provision", "--plan", "{tmp}/p.json", *DRY], "count"),
    ("plan-count-abc", {"p.json": _plan(count="abc")}, ["provision", "--plan", "{tmp}/p.json", *DRY], "count"),
    ("plan-count-negative", {"p.json": _plan(count=-1)}, ["provision", "--plan", "{tmp}/p.json", *DRY], "count"),
    ("plan-count-fraction", {"p.json": _plan(count=2.5)}, ["provision", "--plan", "{tmp}/p.json", *DRY], "count"),
    ("plan-count-huge", {"p.json": _plan(count=10**30)}, ["provision", "--plan", "{tmp}/p.json", *DRY], "count"),
    ("plan-provider-number", {"p.json": _plan(provider=5)}, ["provision", "--plan", "{tmp}/p.json", *DRY], "provider"),
    ("plan-missing-fields", {"p.json": '{"provider": "aws"}'}, ["provision", "--plan", "{tmp}/p.json", *DRY],
     "instance_type, count"),
    ("run-plan-list", {**ITEMS, "p.json": "[1]"}, RUN + ["--plan", "{tmp}/p.json", "--", "echo", "{item}"],
     "JSON object"),
    ("run-plan-strings", {**ITEMS, "p.json": '{"wall_minutes": "abc", "cost_jpy": 1}'},
     RUN + ["--plan", "{tmp}/p.json", "--", "echo", "{item}"], "'abc'"),
    ("run-plan-machines", {**ITEMS, "p.json": '{"wall_minutes": 1, "cost_jpy": 1, "machines": "abc"}'},
     RUN + ["--plan", "{tmp}/p.json", "--", "echo", "{item}"], "machines"),
    ("run-plan-nan", {**ITEMS, "p.json": '{"wall_minutes": NaN, "cost_jpy": 1}'},
     RUN + ["--plan", "{tmp}/p.json", "--", "echo", "{item}"], "nan"),
    # --- numbers out of any sensible range -----------------------------------------------------
    ("units-1e300", {"w.yaml": _workload(jobs="[{units: 1e300}]")}, ["estimate", "--workload", "{tmp}/w.yaml"],
     "jobs[0].units"),
    ("seconds-per-unit-1e300", {"w.yaml": _workload(seconds_per_unit="1e300")},
     ["estimate", "--workload", "{tmp}/w.yaml"], "seconds_per_unit"),
    ("hours-huge", {"w.yaml": _workload(jobs="[{hours: 99999999999999999999}]")},
     ["estimate", "--workload", "{tmp}/w.yaml"], "jobs[0].hours"),
    ("staging-minutes-1e300", {"w.yaml": _workload(staging="{minutes: 1e300}")},
     ["estimate", "--workload", "{tmp}/w.yaml"], "staging.minutes"),
    ("staging-size-over-bandwidth", {"w.yaml": _workload(staging="{size_gb: 1e30, bandwidth_mbps: 1}")},
     ["estimate", "--workload", "{tmp}/w.yaml"], "staging.size_gb"),
    ("setup-minutes-1e300", {"w.yaml": _workload(setup_minutes="1e300")}, ["estimate", "--workload", "{tmp}/w.yaml"],
     "setup_minutes"),
    ("speed-1e-300", {"w.yaml": _workload(speed="{K80: 1e-300}")}, ["estimate", "--workload", "{tmp}/w.yaml"],
     "speed.K80"),
    ("colocation-key-huge", {"w.yaml": _workload(colocation="{slowdown: {99999999999999999999: 2}}")},
     ["estimate", "--workload", "{tmp}/w.yaml"], "colocation.slowdown"),
    ("packing-efficiency-tiny", {"w.yaml": _workload(packing="{efficiency: {2: 1e-9}}")},
     ["estimate", "--workload", "{tmp}/w.yaml"], "packing.efficiency.2"),
    ("name-a-list", {"w.yaml": _workload(name="[1, 2]")}, ["estimate", "--workload", "{tmp}/w.yaml"], "name"),
    ("staging-jpy-huge", {"w.yaml": _workload(staging="{minutes: 1, jpy: 1e40}")},
     ["estimate", "--workload", "{tmp}/w.yaml"], "staging.jpy"),
    ("ttl-overflow", {}, ["provision", "aws:g4dn.xlarge", "x1", "--ttl", "99999999999d", *DRY], "--ttl"),
    ("deadline-overflow", {}, ["estimate", "--videos", "4", "--deadline", "99999999999999d"], "--deadline"),
    ("deadline-superscript", {}, ["estimate", "--videos", "4", "--deadline", "²"], "--deadline"),
    ("count-superscript", {}, ["provision", "aws:g4dn.xlarge", "x²", *DRY], "count"),
    # --- sizes past a stated limit (these hung before) -----------------------------------------
    ("videos-huge", {}, ["estimate", "--videos", "99999999999999999999"], "--videos"),
    ("videos-100000", {}, ["estimate", "--videos", "100000"], "--videos"),
    ("workload-a-million-jobs", {"w.yaml": _workload(jobs="[{units: 100, count: 1000000}]")},
     ["estimate", "--workload", "{tmp}/w.yaml"], "jobs[0]"),
    ("workload-file-too-large", {"w.yaml": WORKLOAD + "  - {units: 10}\n" * 80000},
     ["estimate", "--workload", "{tmp}/w.yaml"], "1 MiB"),
    ("items-too-many", {"items.txt": "".join(f"v{i}\n" for i in range(100_001))}, RUN + ["--", "echo", "{item}"],
     "100,000"),
    ("machines-100000", {}, ["provision", "aws:g4dn.xlarge", "x100000", *DRY], "1,000 machines"),
    ("per-gpu-100000", ITEMS, RUN + ["--per-gpu", "100000", "--", "echo", "{item}"], "--per-gpu"),
    ("retries-huge", ITEMS, RUN + ["--retries", "99999999999999999999", "--", "echo", "{item}"], "--retries"),
    ("run-timeout-huge", ITEMS, RUN + ["--timeout", "99999999999999999999", "--", "echo", "{item}"], "--timeout"),
    ("bench-gpus-100000", {}, ["bench", "resnet50", "--local", "--quick", "--gpus", "100000"], "--gpus"),
    ("bench-max-pack-huge", {}, ["bench", "resnet50", "--local", "--max-pack", "1000"], "--max-pack"),
    # --- issue 46: a bare duration (minutes in --ttl, seconds in --timeout) and GPUs nobody rents ---------
    ("run-timeout-bare", ITEMS, RUN + ["--timeout", "30", "--", "echo", "{item}"], "give the unit"),
    ("bench-timeout-bare", {}, ["bench", "resnet50", "--local", "--timeout", "120"], "give the unit"),
    ("idle-bare", {}, ["provision", "aws:g4dn.xlarge", "x1", "--idle", "30", *DRY], "give the unit"),
    ("gpus-no-such-count", {}, ["estimate", "--videos", "4", "--gpus", "V100:3"], "--gpus V100:3"),
    ("gpus-not-a-gpu", {}, ["estimate", "--videos", "4", "--gpus", "V100:x:y"], "--gpus"),
    # --- accepted silently before --------------------------------------------------------------
    ("deadline-0", {}, ["estimate", "--videos", "4", "--deadline", "0"], "--deadline"),
    ("ttl-0", {}, ["provision", "aws:g4dn.xlarge", "x1", "--ttl", "0", *DRY], "--ttl"),
    ("name-with-newline", {}, ["provision", "aws:g4dn.xlarge", "x1", "--name", "demo\n", *DRY], "cluster name"),
    ("name-empty", {}, ["provision", "aws:g4dn.xlarge", "x1", "--name", "", *DRY], "cluster name"),
    ("ttl-empty", {}, ["provision", "aws:g4dn.xlarge", "x1", "--ttl", "", *DRY], "--ttl"),
    ("image-name-with-newline", {}, ["image", "build", "aws:g4dn.xlarge", "--name", "img\n"], "name"),
    ("quota-unknown-provider", {}, ["estimate", "--videos", "4", "--quota", "nosuch=20"], "nosuch"),
    ("quota-unknown-family", {}, ["estimate", "--videos", "4", "--quota", "azure:NOSUCH=24"], "NOSUCH"),
    ("quota-empty-family", {}, ["estimate", "--videos", "4", "--quota", "azure:=24"], "--quota"),
    ("master-port-70000", {}, ["run", "demo", "--torchrun", "--master-port", "70000", "--", "python", "x.py"],
     "--master-port"),
    # --- hostile files (issue 21) ----------------------------------------------------------------
    ("config-alias-bomb", {"{home}/config/config.yaml": ALIAS_BOMB}, ["provision", "baremetal:t4", "x1", *DRY],
     "alias"),
    ("workload-alias", {"w.yaml": "name: &n x\nseconds_per_unit: 1\nreference_gpu: K80\njobs: [{units: 10, name: *n}]\n"},
     ["estimate", "--workload", "{tmp}/w.yaml"], "alias"),
    ("prices-alias", {"{home}/config/prices.yaml": "offers: &o []\nfx: *o\n"}, ["catalog"], "alias"),
    ("workload-deep-brackets", {"w.yaml": "[" * 100_000}, ["estimate", "--workload", "{tmp}/w.yaml"], "nested"),
    ("workload-deep-dashes", {"w.yaml": "- " * 50_000 + "x\n"}, ["estimate", "--workload", "{tmp}/w.yaml"], "nested"),
    ("config-deep-braces", {"{home}/config/config.yaml": "a: " + "{b: " * 30_000}, ["provision", "baremetal:t4", "x1",
                                                                                     *DRY], "nested"),
    ("inventory-deep", {"inv.yaml": "[" * 100_000, "{home}/config/config.yaml": "providers:\n  baremetal: {inventory: {tmp}/inv.yaml}\n"},
     ["provision", "baremetal:t4", "x1", *DRY], "nested"),
    ("plan-deep", {"p.json": "[" * 100_000}, ["provision", "--plan", "{tmp}/p.json", *DRY], "nested"),
    ("profile-json-deep", {"p.json": "{\"a\": " * 50_000}, ["estimate", "--videos", "4", "--profile", "{tmp}/p.json"],
     "nested"),
    ("run-plan-deep", {**ITEMS, "p.json": "[" * 100_000}, RUN + ["--plan", "{tmp}/p.json", "--", "echo", "{item}"],
     "nested"),
    ("playbook-deep", {"pb.yaml": "[" * 100_000}, ["bootstrap", "demo", "--dry-run", "-p", "{tmp}/pb.yaml"], "nested"),
    ("workload-fifo", {"w.yaml": FIFO}, ["estimate", "--workload", "{tmp}/w.yaml"], "not a regular file"),
    ("items-fifo", {"items.txt": FIFO}, RUN + ["--", "echo", "{item}"], "not a regular file"),
    ("plan-fifo", {"plan.json": FIFO}, ["provision", "--plan", "{tmp}/plan.json", *DRY], "not a regular file"),
    ("config-fifo", {"{home}/config/config.yaml": FIFO}, ["provision", "baremetal:t4", "x1", *DRY], "config file"),
    ("prices-fifo", {"{home}/config/prices.yaml": FIFO}, ["catalog"], "prices file"),
    ("profile-fifo", {"p.yaml": FIFO}, ["estimate", "--videos", "4", "--profile", "{tmp}/p.yaml"], "profile"),
    ("workload-duplicate-key", {"w.yaml": WORKLOAD + "name: y\n"}, ["estimate", "--workload", "{tmp}/w.yaml"],
     "duplicate key 'name'"),
    ("config-duplicate-key", {"{home}/config/config.yaml": "owner: a\nowner: b\n"},
     ["provision", "baremetal:t4", "x1", *DRY], "duplicate key 'owner'"),
    ("prices-duplicate-key", {"{home}/config/prices.yaml": "offers: []\noffers: []\n"}, ["catalog"], "duplicate key"),
    ("plan-duplicate-key", {"p.json": '{"provider": "aws", "instance_type": "g4dn.xlarge", "count": 2, "count": 9}'},
     ["provision", "--plan", "{tmp}/p.json", *DRY], "duplicate key 'count'"),
    ("plan-count-4300-digits", {"p.json": '{"provider": "aws", "instance_type": "g4dn.xlarge", "count": ' + "9" * 4300 + "}"},
     ["provision", "--plan", "{tmp}/p.json", *DRY], "digits"),
    ("plan-count-infinity", {"p.json": '{"provider": "aws", "instance_type": "g4dn.xlarge", "count": Infinity}'},
     ["provision", "--plan", "{tmp}/p.json", *DRY], "finite"),
    ("workload-nan", {"w.yaml": _workload(seconds_per_unit=".nan")}, ["estimate", "--workload", "{tmp}/w.yaml"],
     "finite"),
    ("workload-4300-digits", {"w.yaml": _workload(seconds_per_unit="9" * 4300)},
     ["estimate", "--workload", "{tmp}/w.yaml"], "digits"),
    ("prices-inf", {"{home}/config/prices.yaml": "offers:\n- {provider: aws, name: g4dn.xlarge, price: .inf}\n"},
     ["catalog"], "finite"),
    ("profile-json-nan", {"p.json": '{"gpu": "T4", "seconds_per_unit": NaN}'},
     ["estimate", "--videos", "4", "--profile", "{tmp}/p.json"], "finite"),
    ("config-quota-vcpus-inf", {"{home}/config/config.yaml": "providers:\n  aws: {quota_vcpus: .inf}\n"},
     ["provision", "baremetal:t4", "x1", *DRY], "finite"),
    ("quota-nan", {}, ["estimate", "--videos", "4", "--quota", "azure=nan"], "--quota"),
    ("quota-inf", {}, ["estimate", "--videos", "4", "--quota", "azure=1e999"], "--quota"),
    ("quota-4300-digits", {}, ["estimate", "--videos", "4", "--quota", "azure=" + "9" * 4300], "--quota"),
    ("quota-fullwidth-digits", {}, ["estimate", "--videos", "4", "--quota", "azure=２０"], "--quota"),
    ("as-of-fullwidth-digits", {}, ["estimate", "--videos", "4", "--as-of", "２０１７-08"], "--as-of"),
    ("as-of-arabic-indic-digits", {}, ["estimate", "--videos", "4", "--as-of", "٢٠١٧-٠٨"], "--as-of"),
    ("ttl-fullwidth-digits", {}, ["provision", "aws:g4dn.xlarge", "x1", "--ttl", "４h", *DRY], "--ttl"),
    ("workload-name-escape-codes", {"w.yaml": _workload(name='"\\e[2Jx"')}, ["estimate", "--workload", "{tmp}/w.yaml"],
     "control character"),
    # control characters in names inside the user's prices file and profiles (issue 21, item 7)
    *[(f"prices-{field}-control", {"{home}/config/prices.yaml": "offers:\n- {" + ", ".join(
        f"{k}: {v}" for k, v in {"provider": "aws", "name": "x1", "region": "us-east-1", "gpu": "T4", "gpu_count": 1,
                                 "price": 1, "currency": "USD", field: f'"{value}"'}.items()) + "}\n"},
       ["catalog"], culprit)
      for field, value, culprit in [("name", "g4dn\\e[2J", "control character"),
                                    ("region", "us-east-1\\nx", "control character"),
                                    ("gpu", "T4\\x07", "control character"),
                                    ("quota_family", "G\\e[31m", "control character")]],
    ("config-preferred-region-control", {"{home}/config/config.yaml": 'preferred_regions: ["us-east-1\\nx"]\n'},
     ["estimate", "--videos", "4"], "control character"),
    ("prices-fx-code-control", {"{home}/config/prices.yaml": 'fx: {"U\\e[2JD": 150}\n'}, ["catalog"], "currency code"),
    ("profile-workload-escape", {"p.yaml": "workload: \"x\\e[2J\"\nunit: epoch\nreference_gpu: T4\nseconds_per_unit: 1\n"
                                           "provenance: {source: me, date: 2026-11-01}\n"},
     ["estimate", "--videos", "4", "--profile", "{tmp}/p.yaml"], "control character"),
    ("plan-market-lottery", {"p.json": _plan(market="lottery")}, ["provision", "--plan", "{tmp}/p.json", *DRY], "market"),
    ("ttl-1s", {}, ["provision", "aws:g4dn.xlarge", "x1", "--ttl", "1s", *DRY], "--ttl"),
    *[(f"inventory-{what}", {"inv.yaml": INVENTORY.replace("HOST", host), "{home}/config/config.yaml": INV_CONFIG},
       ["provision", "baremetal:t4", "x1", *DRY], culprit)
      for what, host, culprit in [("port-70000", f"port: 70000, {T4}", "port"), ("port-negative", f"port: -1, {T4}", "port"),
                                  ("gpus-negative", "gpus: {model: T4, count: -3}", "gpus.count"),
                                  ("gpus-zero", "gpus: {model: T4, count: 0}", "gpus.count"),
                                  ("user-option", f"{T4}, user: '-oProxyCommand=touch x'", "user")]],
    ("inventory-address-newline", {"inv.yaml": "hosts:\n- {name: h1, address: \"10.0.0.1\\nx\", gpus: {model: T4}}\n",
                                   "{home}/config/config.yaml": INV_CONFIG}, ["provision", "baremetal:t4", "x1", *DRY],
     "address"),
    ("path-tilde-unknown-user", {}, ["estimate", "--workload", "~nosuchuser-gpuplan/w.yaml"], "w.yaml"),
    ("path-with-newline", {}, ["estimate", "--workload", "{tmp}/w\n.yaml"], "control character"),
    ("region-with-newline", {}, ["provision", "aws:g4dn.xlarge", "x1", "--region", "us-east-1\nx", *DRY], "region"),
    ("region-with-escape", {}, ["provision", "aws:g4dn.xlarge", "x1", "--region", "\x1b[31mus-east-1", *DRY], "region"),
    ("name-with-escape", {}, ["provision", "aws:g4dn.xlarge", "x1", "--name", "\x1b[2Jdemo", *DRY], "cluster name"),
    ("name-with-bidi-override", {}, ["provision", "aws:g4dn.xlarge", "x1", "--name", "demo\u202eexe", *DRY],
     "cluster name"),
    ("region-with-line-separator", {}, ["provision", "aws:g4dn.xlarge", "x1", "--region", "us-east-1\u2028x", *DRY],
     "region"),
    ("installation-id-directory", {"{home}/state/installation-id/": None}, ["teardown", "--sweep", "--dry-run"],
     "installation-id"),
    ("installation-id-binary", {"{home}/state/installation-id": BINARY}, ["teardown", "--sweep", "--dry-run"],
     "installation-id"),
    ("installation-id-not-an-id", {"{home}/state/installation-id": "../../etc\n"}, ["teardown", "--sweep", "--dry-run"],
     "installation-id"),
    # what provision can check without a cloud, checked before anything and by --dry-run (issue 32)
    ("provision-playbook-unknown", {}, ["provision", "aws:g4dn.xlarge", "x1", "--playbook", "nosuch", *DRY], "nosuch"),
    ("provision-ssh-from-bogus", {}, ["provision", "aws:g4dn.xlarge", "x1", "--ssh-from", "bogus", *DRY], "--ssh-from"),
    ("bootstrap-param-empty", {}, ["bootstrap", "demo", "--param", "root="], "root has no value"),
    # YAML 1.2's core schema: `1:30` is not 5,400 (base 60) nor `0x10` 16; they stay text and the field says so
    ("batch-deadline-sexagesimal", {"items.txt": "a\n", "b.yaml": "items: items.txt\ncommand: echo {item}\n"
                                    "workload: colorize-hd\ndeadline: 1:30\n"},
     ["launch", "{tmp}/b.yaml", "--dry-run"], "deadline"),
    ("workload-units-hex", {"w.yaml": WORKLOAD.replace("units: 10", "units: 0x10")},
     ["estimate", "--workload", "{tmp}/w.yaml"], "units"),
    ("workload-duplicate-job-names", {"w.yaml": WORKLOAD.replace("  - {units: 10}", "  - {name: a, units: 10}\n"
                                                                   "  - {name: a, units: 5}")},
     ["estimate", "--workload", "{tmp}/w.yaml"], "two jobs are named 'a'"),
    ("profile-date-impossible", {"p.yaml": "workload: colorize\nunit: epoch\nreference_gpu: T4\nseconds_per_unit: 1\n"
                                           "provenance: {source: me, date: 2026-13-45}\n"},
     ["estimate", "--videos", "4", "--profile", "{tmp}/p.yaml"], "not a valid date"),
    ("profile-date-words", {"p.yaml": "workload: colorize\nunit: epoch\nreference_gpu: T4\nseconds_per_unit: 1\n"
                                      "provenance: {source: me, date: yesterday}\n"},
     ["estimate", "--videos", "4", "--profile", "{tmp}/p.yaml"], "is not a date"),
    ("prices-currency-without-rate", {"{home}/config/prices.yaml": "offers:\n- {provider: sakura, name: my-box, region: is1a,"
                                                                    " gpu: T4, gpu_count: 1, price: 500, currency: XYZ}\n"},
     ["catalog"], "no exchange rate"),
    ("config-unknown-setting", {"{home}/config/config.yaml": "owned: [nosuch]\n"}, ["estimate", "--videos", "4"],
     "unknown setting 'owned'"),
    ("inventory-defaults-a-list", {"inv.yaml": "defaults: [1]\nhosts:\n- {name: h1, address: 127.0.0.1, " + T4 + "}\n",
                                   "{home}/config/config.yaml": INV_CONFIG}, ["provision", "baremetal:t4", "x1", *DRY],
     "defaults must be a mapping"),
    # numbers past what Decimal keeps exact (28 digits): bounded where they are read (issue 32)
    ("budget-1e28", {}, ["estimate", "--videos", "4", "--budget", "1e28"], "--budget"),
    ("max-yen-1e30", {}, ["run", "demo", "--items", "{tmp}/items.txt", "--max-yen", "1e30", "--", "echo", "{item}"],
     "--max-yen"),
    ("prices-fx-1e29", {"{home}/config/prices.yaml": "fx: {USD: 1e29}\n"}, ["estimate", "--videos", "4"], "below"),
    ("prices-price-1e40", {"{home}/config/prices.yaml": "offers:\n- {provider: aws, name: g4dn.xlarge, price: 1e40}\n"},
     ["estimate", "--videos", "4"], "below"),
    # --- round five (issue 43): every field read or refused, by the file's schema at run time ----
    *[(f"batch-{what}", {"items.txt": "a\n", "b.yaml": BATCH + extra}, ["launch", "{tmp}/b.yaml", "--dry-run"], culprit)
      for what, extra, culprit in [
          ("unknown-field", "colour: red\n", "unknown field 'colour'"),
          ("max-yen-empty", "max_yen:\n", "max_yen: empty"),  # silently meant no cap
          ("deadline-null", "deadline: null\n", "deadline: empty"),
          ("infra-empty-list", "infra: []\n", "infra: empty"),  # silently meant anywhere
          ("setup-a-string", "setup: pip install a,b\n", "setup"),  # was split at the comma
          ("playbooks-a-string", "playbooks: docker-gpu\n", "playbooks"),
          ("spot-yes", "spot: yes\n", "spot 'yes': true or false"),
          ("per-gpu-text", "per_gpu: two\n", "per_gpu"),
          ("registry-unknown-field", "registry: {server: ghcr.io, pasword_env: X}\n", "unknown field 'pasword_env'"),
          ("env-bad-name", "env: {1X: a}\n", "'1X' is not a variable name"),
          ("probe-units-three", "probe: {units: [1, 2, 3]}\n", "probe.units"),
          # what the real run refused only after buying, refused by the dry run
          ("image-not-a-reference", "image: 'My Image!'\n", "not an image reference"),
          ("registry-password-unset", "image: ghcr.io/me/x:1\nregistry: {server: ghcr.io, username: me,"
                                      " password_env: GPUPLAN_TEST_NOT_SET}\n", "GPUPLAN_TEST_NOT_SET: not set"),
          ("outputs-under-a-file", "outputs: items.txt/out\n", "outputs folder"),
          # secret_env: names only, each set in the caller's environment, none also in env
          ("secret-env-bad-name", "secret_env: [HF-TOKEN]\n", "'HF-TOKEN' is not a variable name"),
          ("secret-env-empty", "secret_env: []\n", "secret_env: empty"),
          ("secret-env-also-in-env", "secret_env: [HF_TOKEN]\nenv: {HF_TOKEN: x}\n", "HF_TOKEN is in env too"),
          ("secret-env-unset", "secret_env: [GPUPLAN_TEST_NOT_SET]\n", "secret_env GPUPLAN_TEST_NOT_SET: not set"),
      ]],
    ("config-unknown-provider", {"{home}/config/config.yaml": "providers:\n  awz: {ami: ami-1}\n"},
     ["estimate", "--videos", "4"], "providers.awz: unknown provider"),
    ("config-misspelt-provider-setting", {"{home}/config/config.yaml": "providers:\n  aws: {ssh_cidrr: 10.0.0.1/32}\n"},
     ["provision", "aws:g4dn.xlarge", "x1", *DRY], "providers.aws: unknown field 'ssh_cidrr'"),
    ("config-owner-a-list", {"{home}/config/config.yaml": "owner: [a]\n"}, ["estimate", "--videos", "4"], "owner"),
    *[(f"inventory-{what}", {"inv.yaml": text, "{home}/config/config.yaml": INV_CONFIG},
       ["provision", "baremetal:t4", "x1", *DRY], culprit)
      for what, text, culprit in [
          ("unknown-field", "hosts:\n- {name: h1, address: 127.0.0.1, gpu: {model: T4}, gpus: {model: T4}}\n",
           "hosts[0]: unknown field 'gpu'"),
          ("unknown-top-field", "host: []\nhosts:\n- {name: h1, address: 127.0.0.1, gpus: {model: T4}}\n",
           "unknown field 'host'"),
          ("count-text", "hosts:\n- {name: h1, address: 127.0.0.1, gpus: {model: T4, count: two}}\n", "gpus.count"),
          ("group-escape", "hosts:\n- {name: h1, address: 127.0.0.1, group: \"t4\\e[2J\", gpus: {model: T4}}\n",
           "control character"),
          ("model-escape", "hosts:\n- {name: h1, address: 127.0.0.1, gpus: {model: \"T4\\e]0;x\\a\"}}\n",
           "control character"),
          # carried over: the claim failed on it only after the dry run passed
          ("missing-key-file", "hosts:\n- {name: h1, address: 127.0.0.1, key: /nonexistent/gpuplan-key, gpus: {model: T4}}\n",
           "SSH key /nonexistent/gpuplan-key"),
      ]],
    # carried over: a profile of the wrong shape was "unexpected error: TypeError"
    *[(f"profile-{what}", {"p.yaml": PROFILE + extra}, ["estimate", "--videos", "4", "--profile", "{tmp}/p.yaml"], culprit)
      for what, extra, culprit in [("slowdown-a-list", "colocation_slowdown: [1, 2]\n", "colocation_slowdown"),
                                   ("packing-a-number", "packing: 3\n", "packing"),
                                   ("dp-scaling-a-mapping", "dp_scaling: {gpus: 2}\n", "dp_scaling"),
                                   ("feed-a-list", "feed: [1]\n", "feed"),
                                   ("packing-entry-a-list", "packing: {2: [1]}\n", "packing.2"),
                                   ("unknown-field", "colour: red\n", "unknown field 'colour'")]],
    ("items-escape", {"items.txt": "a.mp4\n\x1b[2Jb.mp4\n", "b.yaml": BATCH}, ["launch", "{tmp}/b.yaml", "--dry-run"],
     "items file"),
    # --out checked before the benchmark or the network
    ("bench-out-under-a-file", {"f": "x"}, ["bench", "resnet50", "--local", "--out", "{tmp}/f/p.yaml"], "--out"),
    ("refresh-out-under-a-file", {"f": "x"}, ["catalog", "refresh", "--provider", "aws", "--out", "{tmp}/f/snap"],
     "--out"),
    ("dok-artifacts-out-a-file", {"f": "x"}, ["dok", "artifacts", "--run", "r", "--out", "{tmp}/f"], "--out"),
    # --- typer's own usage errors: one line as well -------------------------------------------
    ("videos-not-a-number", {}, ["estimate", "--videos", "abc"], "--videos"),
    ("unknown-option", {}, ["estimate", "--nosuch"], "--nosuch"),
    ("unknown-command", {}, ["nosuch"], "nosuch"),
    ("missing-argument", {}, ["run"], "CLUSTER"),  # as the usage line and help name it
    ("job-args-unbalanced-quote", {}, ["bench", "resnet50", "--local", "--job-args", "'--height 360"], "--job-args"),
]


def _write(files: dict, tmp_path, home) -> None:
    for name, content in files.items():
        path = home / name[len("{home}/"):] if name.startswith("{home}/") else tmp_path / name
        if name.endswith("/"):
            path.mkdir(parents=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is FIFO:
            os.mkfifo(path)
            continue
        if isinstance(content, str):
            content = content.replace("{tmp}", str(tmp_path)).replace("{home}", str(home)).encode()
        path.write_bytes(content)


def _check_one_line(r, culprit: str) -> None:
    lines = r.err.strip().splitlines()
    assert r.code == 2, (r.code, r.err)
    assert len(lines) == 1, r.err
    assert "Traceback" not in r.err and "unexpected error" not in r.err
    assert lines[0].startswith("gpuplan: error: ") and culprit in lines[0], lines[0]


@pytest.mark.parametrize("files, argv, culprit", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_exit_2(files, argv, culprit, cli, tmp_path, gpuplan_home):
    _write(files, tmp_path, gpuplan_home)
    r = cli(*[a.replace("{tmp}", str(tmp_path)) for a in argv])
    _check_one_line(r, culprit)


def test_a_malformed_region_reaching_botocore_is_one_line(cli, gpuplan_home, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    _check_one_line(cli("teardown", "--sweep", "--dry-run", "--provider", "aws", "--region", "us east!"),
                    "bad AWS region")


def _truncated(path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (x)")
    db.executemany("INSERT INTO t VALUES (?)", [("x" * 500,)] * 200)
    db.commit()
    db.close()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def _foreign(path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE clusters (name)")  # someone else's database that happens to have this name
    db.commit()
    db.close()


DAMAGED = {
    "garbage": lambda p: p.write_bytes(b"this is not a database at all" * 100),
    "binary": lambda p: p.write_bytes(BINARY * 4),
    "header-only": lambda p: p.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100),
    "truncated": _truncated,
    "foreign": _foreign,
}


@pytest.mark.parametrize("damage", sorted(DAMAGED))
@pytest.mark.parametrize("argv", [["status"], ["estimate", "--videos", "4"], ["teardown", "--all"],
                                  ["image", "list"], ["ssh", "demo"]], ids=lambda a: a[0])
def test_a_damaged_state_db_is_named_and_left_as_it_is(damage, argv, cli, gpuplan_home):
    db = gpuplan_home / "state" / "state.db"
    db.parent.mkdir(parents=True)
    DAMAGED[damage](db)
    before = db.read_bytes()
    r = cli(*argv)
    _check_one_line(r, str(db))
    assert "gpuplan state database" in r.err and f"mv {db} {db}.bad" in r.err
    assert db.read_bytes() == before  # never deleted, never overwritten, no schema added
    assert sorted(p.name for p in db.parent.iterdir()) == ["state.db"]


def test_a_state_db_path_that_is_a_directory_is_refused(cli, gpuplan_home):
    (gpuplan_home / "state" / "state.db").mkdir(parents=True)
    _check_one_line(cli("status"), "is not a file")


@pytest.fixture
def unwritable():
    """unwritable(path): no one may write it from now to the test's end, root included (chmod for
    others, `chattr +i` for root; skipped where neither is possible)."""
    made = []

    def make(path):
        if os.geteuid() != 0:
            path.chmod(0o500 if path.is_dir() else 0o400)
        elif subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
            pytest.skip("running as root where `chattr +i` is refused: nothing here is unwritable for root")
        made.append(path)

    yield make
    for path in reversed(made):
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        path.chmod(0o700 if path.is_dir() else 0o600)


def test_a_read_only_state_db_is_one_line(cli, gpuplan_home, unwritable):
    assert cli("status").code == 0  # makes the database
    db = gpuplan_home / "state" / "state.db"
    unwritable(db.parent)
    unwritable(db)
    _check_one_line(cli("teardown", "--sweep", "--dry-run"), "read-only")
    _check_one_line(cli("status"), "read-only")


def test_an_unwritable_gpuplan_home_and_folder_are_one_line(cli, gpuplan_home, tmp_path, unwritable):
    gpuplan_home.mkdir()
    unwritable(gpuplan_home)
    _check_one_line(cli("status"), "set GPUPLAN_HOME to a folder you can write")
    r = cli("estimate", "--videos", "4")  # needs no state: still plans
    assert r.code == 0 and "¥" in r.out, r.err
    folder = tmp_path / "plans"
    folder.mkdir()
    unwritable(folder)
    _check_one_line(cli("estimate", "--videos", "4", "--save", str(folder / "plan.json")), "cannot write the plan")


@pytest.mark.parametrize("argv, code", [(["estimate", "--videos", "4"], 0), (["estimate", "--videos", "abc"], 2),
                                        (["estimate", "--workload", "/nonexistent/w.yaml"], 2)])
def test_an_ascii_only_terminal_gets_no_unexpected_error(argv, code, gpuplan_home):
    """PYTHONIOENCODING=ascii: yen signs and ellipses are replaced, never a UnicodeEncodeError."""
    import os as _os

    env = {**_os.environ, "PYTHONIOENCODING": "ascii", "GPUPLAN_HOME": str(gpuplan_home)}
    done = subprocess.run([sys.executable, "-m", "gpuplan", *argv], capture_output=True, text=True, timeout=120,
                          env=env, errors="replace")
    assert done.returncode == code, done.stderr
    assert "unexpected error" not in done.stderr and "Traceback" not in done.stderr
    if code:
        assert len(done.stderr.strip().splitlines()) == 1
    else:
        assert "?" in done.stdout  # the yen sign, replaced


def test_a_gpuplan_home_that_is_a_file_is_named(cli, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.write_text("not a folder\n")
    monkeypatch.setenv("GPUPLAN_HOME", str(home))
    _check_one_line(cli("status"), "GPUPLAN_HOME")
    assert home.read_text() == "not a folder\n"


def test_a_batch_at_the_job_limit_is_planned_not_refused(gpuplan_home):
    """--videos at the limit is planned, within a hang guard; one more is refused. On one owned
    workstation, so the test stays short: benchmarks/limits_bench.py times the whole catalog."""
    from gpuplan.planning.workloads import MAX_JOBS

    assert MAX_JOBS >= 20_000  # issue 13: 20,000 jobs plan in under 10 s (benchmarks/limits_bench.py)
    argv = [sys.executable, "-m", "gpuplan", "estimate", "--as-of", "2017-08", "--provider", "baremetal",
            "--owned", "onprem-1080ti", "--format", "json"]
    done = subprocess.run([*argv, "--videos", str(MAX_JOBS)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    rec = data["recommended"]
    assert data["jobs"] == MAX_JOBS and sum(len(m["jobs"]) for m in rec["machines"]) == MAX_JOBS
    assert rec["wall_minutes"] == MAX_JOBS * 120  # report A: 120 min per video, one after another on one GPU
    over = subprocess.run([*argv, "--videos", str(MAX_JOBS + 1)], capture_output=True, text=True, timeout=60)
    assert over.returncode == 2 and f"at most {MAX_JOBS:,} jobs" in over.stderr


def test_free_text_in_a_prices_file_prints_on_one_line_without_escape_codes(cli, gpuplan_home):
    """A note or a source with a newline or a terminal escape code is kept but printed as one
    line that cannot drive the terminal."""
    (gpuplan_home / "config").mkdir(parents=True)
    (gpuplan_home / "config" / "prices.yaml").write_text(
        "offers:\n- {provider: aws, name: g4dn.xlarge, region: us-east-1, price: 0.5,"
        ' source: "my quote\\nline two\\e[2J", notes: "note\\tone\\e]0;title\\a"}\n')
    r = cli("catalog", "--provider", "aws", "--region", "us-east-1", "--format", "json")
    assert r.code == 0, r.err
    rows = [o for o in json.loads(r.out)["offers"] if o["name"] == "g4dn.xlarge" and o["market"] == "on-demand"]
    assert rows and rows[0]["source"] == "my quote line two\\x1b[2J"
    assert rows[0]["notes"] == "note one\\x1b]0;title\\x07"
    shown = cli("catalog", "--provider", "aws", "--region", "us-east-1", "--all")
    assert shown.code == 0 and "\x1b" not in shown.out and "\x07" not in shown.out


@pytest.mark.parametrize("how", ["closed", "full", "pipe"])
def test_output_that_cannot_be_written_ends_quietly_with_a_non_zero_code(how, gpuplan_home, tmp_path):
    """stdout closed (`>&-`), full (`>/dev/full`) or a pipe whose reader has gone: one line on
    stderr (none for the pipe), exit 1, no traceback."""
    import subprocess
    import sys

    argv = [sys.executable, "-m", "gpuplan", "catalog", "--all"]
    if how == "pipe":
        reader = subprocess.Popen(["true"], stdin=subprocess.PIPE)
        reader.wait()  # gone before a byte is written
        r = subprocess.run(argv, stdout=reader.stdin, stderr=subprocess.PIPE, text=True, timeout=120)
        reader.stdin.close()
    else:
        out = subprocess.DEVNULL if how == "closed" else open("/dev/full", "w")  # noqa: SIM115
        pre = (lambda: os.close(1)) if how == "closed" else None
        r = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, text=True, timeout=120, preexec_fn=pre)
    assert r.returncode == 1 and "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr
    if how == "pipe":
        assert r.stderr == ""
    else:
        assert r.stderr.strip().splitlines() == [
            f"gpuplan: error: cannot write the output ({'standard output is closed' if how == 'closed' else 'No space left on device'});"
            " nothing else went wrong"]


def test_every_mistake_of_a_batch_file_in_one_pass(cli, tmp_path):
    """Four mistakes, four lines (from the file's schema), exit 2; no run reports only the first."""
    (tmp_path / "items.txt").write_text("a\n")
    (tmp_path / "b.yaml").write_text(BATCH + "max_yen:\nobjective: cheap\nspot: yes\ncolour: red\n")
    r = cli("launch", str(tmp_path / "b.yaml"), "--dry-run")
    lines = r.err.strip().splitlines()
    assert r.code == 2 and "Traceback" not in r.err, r.err
    assert lines[0] == f"gpuplan: error: batch file {tmp_path / 'b.yaml'} has 4 mistakes; fix them all:"
    assert [ln.split()[1].rstrip(":") for ln in lines[1:]] == ["max_yen", "objective", "spot", "unknown"]
    assert "'colour'" in lines[4] and "'cheap'" in lines[2]
    assert all(ln.startswith("  - ") for ln in lines[1:])


def _files(home) -> list[str]:
    return sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file()) if home.exists() else []


REFUSED = [  # (files, argv): each refused before anything is done
    (ITEMS, RUN + ["--", "echo", "x"]),  # no {item}: took the cluster's lock first
    ({}, ["run", "demo", "--items", "{tmp}/none.txt", "--", "echo", "{item}"]),
    ({}, ["teardown", "nosuch", "-y"]),
    ({}, ["ssh", "nosuch"]),
    ({}, ["logs", "nosuch", "j", "1"]),
    ({}, ["launch", "--resume", "nosuch"]),
    ({}, ["teardown", "--sweep", "--provider", "nosuch", "--dry-run"]),
    ({**ITEMS, "b.yaml": BATCH + "max_yen: 1\n"}, ["launch", "{tmp}/b.yaml", "--dry-run"]),  # over the cap
    ({**ITEMS, "b.yaml": BATCH + "max_yen: 1\n"}, ["launch", "{tmp}/b.yaml", "-y"]),
    ({**ITEMS, "b.yaml": BATCH + "secret_env: [GPUPLAN_TEST_NOT_SET]\n"}, ["launch", "{tmp}/b.yaml", "--dry-run"]),
    ({**ITEMS, "b.yaml": BATCH + "secret_env: [GPUPLAN_TEST_NOT_SET]\n"}, ["launch", "{tmp}/b.yaml", "-y"]),
]


@pytest.mark.parametrize("files, argv", REFUSED, ids=[" ".join(a[:2]) for _, a in REFUSED])
def test_a_refused_command_writes_nothing(files, argv, cli, tmp_path, gpuplan_home, monkeypatch):
    """No empty state.db, no lock file, no saved or temporary plan (a refused `launch --dry-run`
    left gpuplan-launch-*/plan.json in the temp folder)."""
    scratch = tmp_path / "tmpdir"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    _write(files, tmp_path, gpuplan_home)
    before = _files(gpuplan_home)
    r = cli(*[a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert r.code == 2, r.err
    assert _files(gpuplan_home) == before
    assert list(scratch.iterdir()) == []


def test_a_refused_command_keeps_the_state_it_found(cli, gpuplan_home, tmp_path):
    """Only what the refused command itself made goes: an existing state.db and its rows stay."""
    assert cli("status").code == 0
    db = gpuplan_home / "state" / "state.db"
    before = db.read_bytes()
    (tmp_path / "items.txt").write_text("a\n")
    assert cli("run", "demo", "--items", str(tmp_path / "items.txt"), "--", "echo", "x").code == 2
    assert db.read_bytes() == before and not list((gpuplan_home / "state").glob("locks/*.lock"))


@pytest.mark.parametrize("config, culprit", [
    ("providers:\n  baremetal: {inventory: {tmp}/nosuch.yaml}\n", "inventory: its hosts are not planned: {tmp}/nosuch.yaml"),
    ("providers:\n  slurm: {clusters: {tmp}/nosuch.yaml}\n", "slurm: its partitions are not planned: {tmp}/nosuch.yaml"),
    ("providers:\n  baremetal: {inventory: {tmp}/inv.yaml}\n", "inventory: its hosts are not planned"),
    ("providers:\n  slurm: {clusters: {tmp}/inv.yaml}\n", "slurm: its partitions are not planned"),
], ids=["inventory-missing", "slurm-missing", "inventory-broken", "slurm-broken"])
def test_a_broken_inventory_or_slurm_file_is_named_in_the_estimate(config, culprit, cli, tmp_path, gpuplan_home):
    """The rest is still planned, and the estimate says which file was left out and why."""
    _write({"inv.yaml": "hosts: [{name: a, colour: red}]\n", "{home}/config/config.yaml": config}, tmp_path, gpuplan_home)
    r = cli("estimate", "--videos", "4", "--format", "json")
    assert r.code == 0, r.err
    notes = list(json.loads(r.out)["notes"].values())
    assert any(culprit.replace("{tmp}", str(tmp_path)) in n for n in notes), notes
    assert json.loads(r.out)["recommended"] is not None


def test_the_config_schema_knows_every_provider_and_is_a_valid_schema():
    """config.yaml is checked against gpuplan/schemas/config.schema.json at run time: every
    provider installed has its settings there (slurm's clusters too)."""
    from gpuplan.fleet.provider import available
    from gpuplan.schemas.check import KNOWN, schema

    jsonschema = pytest.importorskip("jsonschema")
    s = schema("config")
    jsonschema.Draft202012Validator.check_schema(s)
    assert set(s["properties"]["providers"]["properties"]) == set(available()) | {"slurm"}

    def keywords(node):
        if isinstance(node, dict):
            for k, v in node.items():
                yield k
                if k not in ("properties", "dependentRequired"):
                    yield from keywords(v)
                else:
                    for sub in v.values():
                        yield from keywords(sub)
        elif isinstance(node, list):
            for v in node:
                yield from keywords(v)

    for name in ("batch", "inventory", "profile", "config"):  # checked at run time: every keyword they use understood
        assert set(keywords(schema(name))) <= KNOWN, name


def test_a_slurm_partitions_gpu_with_an_escape_code_is_named_not_printed(cli, gpuplan_home):
    (gpuplan_home / "config").mkdir(parents=True)
    (gpuplan_home / "config" / "slurm.yaml").write_text(
        'clusters:\n- name: lab\n  login: {address: 127.0.0.1, user: me}\n  partitions:\n'
        '  - {name: gpu, gpu: "V100\\e[2J", gpus_per_node: 4, nodes: 2, cost: {power_watts: 300}}\n')
    r = cli("estimate", "--videos", "4", "--all")
    assert r.code == 0, r.err
    assert "\x1b" not in r.out + r.err
    assert "slurm: its partitions are not planned" in r.out and "gpu 'V100\\\\x1b[2J' contains a control character" in r.out
