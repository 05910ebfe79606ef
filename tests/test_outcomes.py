"""Exclusions and warnings are values (issue 18 item 1): no decision reads a sentence. Rendered as
bare codes or as garbled words, every field-report case and README estimate example gets the same
picks, proofs and folded rows as with today's wording."""

from __future__ import annotations

import hashlib
import re
from decimal import Decimal

import pytest

from gpuplan.cli import estimate as cli_estimate
from gpuplan.market import catalog
from gpuplan.planning import optimizer, outcomes, workloads
from gpuplan.planning.model import Quotas, Setting
from gpuplan.planning.outcomes import Code
from support import planner as sp


def _report_c():
    """Report C's clips (3 x 147.5 s, 2 and 3 per GPU measured on a GTX 1080) on a GTX 1080 and a T4."""
    from gpuplan.planning.plan_types import Job, Packing, Workload

    work = Workload(name="clips", description="", unit="second", seconds_per_unit=Decimal(1), reference_gpu="GTX 1080",
                    speed={"GTX 1080": Decimal(1), "T4": Decimal(1)}, memory_gib=Decimal("2.4"),
                    packing=Packing({1: Decimal(1), 2: Decimal("0.7155"), 3: Decimal("0.57")}),
                    jobs=tuple(Job(f"clip{i + 1}", Decimal("147.5")) for i in range(3)))
    gtx = sp.offer(name="gtx1080", gpu="GTX 1080", memory="8", price="3600", granularity=1, minimum=0)
    t4 = sp.offer(name="t4", gpu="T4", memory="16", price="3600", granularity=1, minimum=0)
    return work, Setting(catalog=sp.catalog([gtx, t4], {"azure": sp.facts(setup_min=0)})), {}


def _case(name):
    """The estimate's inputs: (workload, setting, keyword arguments)."""
    if name == "report C":
        return _report_c()
    as_of, work, kw, extra = None, workloads.videos(4), {}, {}
    if name == "report A (--videos 4 --as-of 2017-08)":
        as_of = "2017-08"
    elif name == "report B (resnet50, 2017-08)":
        as_of, work = "2017-08", workloads.load("resnet50")
    elif name == "--videos 8 --deadline 3h --objective time":
        work, extra, kw = workloads.videos(8), {"deadline_s": 3 * 3600}, {"objective": "time"}
    elif name == "--videos 4 --provider azure --quota azure=20":
        extra, kw = {"quotas": Quotas(total={"azure": 20})}, {"provider": "azure"}
    elif name == "--workload yolo-fhd --spot":
        work, extra = workloads.load("yolo-fhd"), {"spot": True}
    elif name == "--videos 8 --deadline 5m (nothing feasible)":
        work, extra = workloads.videos(8), {"deadline_s": 5 * 60}
    elif name == "--videos 40 --as-of 2017-08 --deadline 4h":
        as_of, work, extra = "2017-08", workloads.videos(40), {"deadline_s": 4 * 3600}
    cat = catalog.load(as_of)
    return work, Setting(catalog=cat, as_of_month=as_of or "", **extra), kw


CASES = [
    "report A (--videos 4 --as-of 2017-08)",
    "report B (resnet50, 2017-08)",
    "report C",
    "--videos 4",
    "--videos 8 --deadline 3h --objective time",
    "--videos 4 --provider azure --quota azure=20",
    "--workload yolo-fhd --spot",
    "--videos 8 --deadline 5m (nothing feasible)",
    "--videos 40 --as-of 2017-08 --deadline 4h",
]


def _facts(name):
    """Everything a decision makes, none of it words: every plan in order with its figures and
    codes, the pick, the frontier, the proof, the folded rows and the warning columns."""
    work, setting, kw = _case(name)
    est = optimizer.estimate(work, setting, **kw)

    def key(p):
        return (p.label, p.setup, p.per_gpu, p.feasible, p.recommendable, p.cost, p.wall_s, p.optimal,
                outcomes.codes(p.excluded_by), outcomes.codes(p.warned_by))

    rows, alike = cli_estimate._visible(est, show_all=False)
    return {
        "plans": [key(p) for p in est.plans],
        "recommended": key(est.recommended) if est.recommended else None,
        "pareto": [key(p) for p in est.pareto],
        "proof": (est.proven, est.gap),
        "folded": [(key(p), alike.get(id(p), 0)) for p in rows],
        "table": [r[:-1] for r in cli_estimate._rows(est, show_all=False)],
        "warning columns": [cli_estimate._warning_kinds(p.warned_by) for p in est.plans],
        "other reasons": re.findall(r"and (\d+) other reason", est.reason),
        "excluded": cli_estimate._excluded_line(est),
    }


def _bare(o):
    return o.code.value


def _garbled(o, real=outcomes.render):
    return "zq" + hashlib.sha1(real(o).encode()).hexdigest()[:10]


@pytest.mark.parametrize("name", CASES)
def test_decisions_do_not_change_with_the_words(name, monkeypatch):
    today = _facts(name)
    assert today["plans"] and (today["recommended"] is not None or "nothing feasible" in name)
    for words in (_bare, _garbled):
        monkeypatch.setattr(outcomes, "render", words)
        assert _facts(name) == today, words.__name__
        monkeypatch.undo()


def test_the_cases_exercise_the_decisions_that_used_to_read_words():
    # folded exclusions (alike but for the offer's name), deadline-missing candidates, a default quota warning
    a = _facts("report A (--videos 4 --as-of 2017-08)")
    assert a["excluded"]  # issue 19: with a pick, the excluded plans fold into one count per code
    late = _facts("--videos 40 --as-of 2017-08 --deadline 4h")
    assert any("deadline" in codes for *_, codes, _ in late["plans"])
    assert any("quota" in kinds for kinds in a["warning columns"])
    none = _facts("--videos 8 --deadline 5m (nothing feasible)")
    assert none["recommended"] is None
    # deadline misses fold where they read alike (to the minute shown), not to the exact second
    assert sum(n for _, n in none["folded"]) > 40


def test_an_outcome_carries_its_figures_into_json():
    o = outcomes.of(Code.DEADLINE, wall_s=5400, deadline_s=3600)
    assert outcomes.render(o) == "misses the deadline by 30 min (wall 90 min > 60 min)"
    assert o.as_dict() == {"code": "deadline", "wall_s": 5400, "deadline_s": 3600}
    mem = outcomes.of(Code.MEMORY, need_gib=Decimal("13"), gpu_memory_gib=Decimal(12), gpu="K80")
    assert mem.as_dict() == {"code": "memory", "need_gib": "13", "gpu_memory_gib": "12", "gpu": "K80"}


def test_every_code_has_words():
    assert set(outcomes._WORDS) == set(Code)


def test_estimate_json_carries_codes_and_figures(cli):
    import json

    r = cli("estimate", "--videos", "4", "--as-of", "2017-08", "--deadline", "2h", "--format", "json")
    data = json.loads(r.out)
    late = [p for p in data["plans"] if any(x["code"] == "deadline" for x in p["excluded_by"])]
    assert late
    first = next(x for x in late[0]["excluded_by"] if x["code"] == "deadline")
    assert first["deadline_s"] == 7200 and first["wall_s"] > 7200
