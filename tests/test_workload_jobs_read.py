"""A big workload's plain entries ({units: N}) are read by a short path (issue 47): the same
jobs as the full checks make of them, and every entry those checks refuse still refused with
the same line."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpuplan.errors import UsageError
from gpuplan.planning import workloads


def _work(jobs, spu=1) -> dict:
    return {"name": "w", "seconds_per_unit": spu, "reference_gpu": "K80", "jobs": jobs}


def test_plain_entries_make_the_jobs_the_full_checks_make():
    plain = workloads.from_dict(_work([{"units": 5}, {"units": 7}, {"units": 5}]), "f")
    full = workloads.from_dict(_work([{"units": 5, "count": 1}, {"units": "7"}, {"seconds": 5}]), "f")
    assert plain.jobs == full.jobs == (workloads.Job("job1", Decimal(5)), workloads.Job("job2", Decimal(7)),
                                       workloads.Job("job3", Decimal(5)))
    assert [str(j.units) for j in plain.jobs] == ["5", "7", "5"]


@pytest.mark.parametrize("entry, said", [
    ({"units": 0}, "jobs[1].units must be a positive number, not 0"),
    ({"units": True}, "jobs[1].units must be a number, not True"),
    ({"units": -3}, "jobs[1].units must be a positive number, not -3"),
    ({"units": 100 * 365 * 86400 + 1}, "over the limit of 100 years"),
])
def test_entries_the_checks_refuse_are_still_refused(entry, said):
    with pytest.raises(UsageError) as err:
        workloads.from_dict(_work([{"units": 5}, entry]), "f")
    assert said in str(err.value)


def test_the_job_limit_and_names_still_hold():
    with pytest.raises(UsageError, match="at most 20,000"):
        workloads.from_dict(_work([{"units": 1}] * 20_001), "f")
    with pytest.raises(UsageError, match="two jobs are named 'job1'"):
        workloads.from_dict(_work([{"units": 1}, {"units": 2, "name": "job1"}]), "f")
    # the limit counts seconds: units x seconds_per_unit
    with pytest.raises(UsageError, match="over the limit of 100 years"):
        workloads.from_dict(_work([{"units": 100 * 365 * 86400 // 2 + 1}], spu=2), "f")
