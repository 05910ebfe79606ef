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
    (332718, "92:25 h"),  # 5545.3 min
])
def test_duration(seconds, text):
    assert fmt.duration(seconds) == text


def test_count():
    assert fmt.count(20000) == "20,000"
