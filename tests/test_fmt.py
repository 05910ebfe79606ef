"""One way to write yen, durations and counts for people."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpuplan.planning import fmt


@pytest.mark.parametrize("amount, places, text", [
    (Decimal("14601.81"), 0, "¥14,602"),
    (Decimal("14601.81"), 2, "¥14,601.81"),
    (Decimal("825.5"), 0, "¥826"),  # half up, once
    (Decimal("0.4"), 0, "¥0"),
    (826, 0, "¥826"),
    (None, 0, "?"),
])
def test_yen(amount, places, text):
    assert fmt.yen(amount, places) == text


@pytest.mark.parametrize("seconds, text", [
    (45, "45 s"),
    (60, "1 min"),
    (5158, "86 min"),  # 85.97 min
    (7170, "120 min"),  # 119.5 min: under two hours, so minutes
    (7200, "2:00 h"),
    (10800, "3:00 h"),
    (172740, "47:59 h"),  # under two days: hours and minutes
    (332718, "3 d 20 h"),  # 92.4 h: days and hours past two days (was "92:25 h", which reads as a clock)
    (18144000, "210 d 0 h"),
])
def test_duration(seconds, text):
    assert fmt.duration(seconds) == text


def test_count():
    assert fmt.count(20000) == "20,000"


def test_plurals_agree_with_their_number():
    assert fmt.plural(1, "job") == "1 job"
    assert fmt.plural(2, "job") == "2 jobs"
    assert fmt.plural(20000, "stream") == "20,000 streams"
    assert fmt.plural(1, "GPU-hour") == "1 GPU-hour"


def test_a_column_of_durations_reads_in_one_unit():
    assert fmt.durations([5158, 10800, None]) == ["1:26 h", "3:00 h", "?"]
    assert fmt.durations([6960, 7440]) == ["1:56 h", "2:04 h"]  # not "116 min" beside "2:04 h"
    assert fmt.durations([3000, 6000]) == ["50 min", "100 min"]
    # a column with a figure under two days stays in hours and minutes (issue 42: in days, 1:57 h
    # read "0 d 2 h" beside the same figure written "1:57 h" on the pick's line); a column all past
    # two days, and a lone figure, keep days and hours
    assert fmt.durations([3600, 302400]) == ["1:00 h", "84:00 h"]
    assert fmt.durations([172800, 302400]) == ["2 d 0 h", "3 d 12 h"]
    assert fmt.durations([7020, 7200, 111600, 302400]) == ["1:57 h", "2:00 h", "31:00 h", "84:00 h"]
    assert fmt.scale_of([7020, 302400]) == "h"
    assert fmt.duration(302400) == "3 d 12 h"
    assert fmt.durations([45, 50]) == ["45 s", "50 s"]
