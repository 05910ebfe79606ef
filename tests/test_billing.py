"""The one billing rule (gpuplan/market/billing.py): granularity, minimum, daily and monthly caps."""

from decimal import Decimal

from gpuplan.market.billing import DAY_S, HOUR_S, MONTH_S, Terms, billed_seconds, charge, charge_yen, floor_rate

# Sakura 高火力 VRT H100 (shared/notes/sakura-koukaryoku.md): ¥990/h, ¥23,100/day, ¥385,000/month, hourly.
VRT_H100 = Terms(Decimal(990), HOUR_S, 3600, 3600, Decimal(23100), Decimal(385000))


def test_rounding_and_minimum():
    assert billed_seconds(0, 60, 60) == 0
    assert billed_seconds(1, 60, 60) == 60
    assert billed_seconds(61, 60, 0) == 120
    assert billed_seconds(30, 1, 60) == 60
    assert billed_seconds(3601, 3600, 0) == 7200


def test_ten_minutes_on_an_hourly_node_costs_the_hour():
    assert charge(600, VRT_H100) == Decimal(990)
    assert charge_yen(600, VRT_H100) == 990


def test_per_second_price_is_exact():
    aws = Terms(Decimal("83.21"), HOUR_S, 1, 60)
    assert charge(10, aws) == Decimal("83.21") * 60 / 3600
    assert charge(7200, aws) == Decimal("166.42")


def test_daily_cap_binds_past_the_break_even_hour():
    # 23 h x 990 = 22,770 < 23,100; 24 h x 990 = 23,760 > 23,100
    assert charge(23 * HOUR_S, VRT_H100) == Decimal(22770)
    assert charge(DAY_S, VRT_H100) == Decimal(23100)
    assert charge(DAY_S + 2 * HOUR_S, VRT_H100) == Decimal(23100 + 1980)


def test_monthly_cap_binds_a_700_hour_run():
    assert charge(700 * HOUR_S, VRT_H100) == Decimal(385000)
    # two months and a day: two whole months plus one day
    assert charge(60 * DAY_S + DAY_S, VRT_H100) == Decimal(2 * 385000 + 23100)


def test_no_hold_is_billed_below_the_floor_rate_and_a_whole_month_is_billed_at_it():
    # VRT H100: ¥990 an hour (0.275 a second), ¥23,100 a day (0.267), ¥385,000 a month of 30 days (0.1485)
    assert floor_rate(VRT_H100) == Decimal(385000) / MONTH_S
    holds = [1, 600, HOUR_S, 23 * HOUR_S, DAY_S, DAY_S + 1, 15 * DAY_S + 7, MONTH_S - 1, MONTH_S, MONTH_S + 1,
             2 * MONTH_S + 3 * HOUR_S, 5 * MONTH_S]
    assert all(charge(t, VRT_H100) >= t * floor_rate(VRT_H100) for t in holds)
    assert charge(MONTH_S, VRT_H100) == MONTH_S * floor_rate(VRT_H100)  # the floor is reached: a tight bound
    per_second = Terms(Decimal("83.21"), HOUR_S, 1, 60)
    assert floor_rate(per_second) == Decimal("83.21") / HOUR_S


def test_no_cap_is_linear():
    t = Terms(Decimal(100), HOUR_S, 3600, 0)
    assert charge(700 * HOUR_S, t) == Decimal(70000)


def test_terms_for_an_hourly_offer_carry_its_caps():
    from dataclasses import replace

    from gpuplan.market.billing import terms_for
    from gpuplan.planning.types import Offer

    o = Offer("sakura", "24Core-240GB-H100x1", (), "is1a", "H100", 1, Decimal(80), 24, Decimal(240), Decimal(990), "JPY",
              "hour", Decimal(990), 3600, 3600, "", None, None, "")
    assert charge(700 * HOUR_S, terms_for(o)) == Decimal(693000)
    capped = replace(o, daily_cap_jpy=Decimal(23100), monthly_cap_jpy=Decimal(385000))
    assert charge(700 * HOUR_S, terms_for(capped)) == Decimal(385000)


def test_charge_yen_rounds_a_fraction_up():
    # ¥990.50 of use is invoiced ¥991 (Decimal's // truncates toward zero: -(-x // 1) gave ¥990)
    assert charge_yen(1801, Terms(Decimal(1981), HOUR_S, 1, 0)) == 992
    assert charge_yen(1, Terms(Decimal(3600), HOUR_S, 1, 0)) == 1
    assert charge_yen(2, Terms(Decimal(1800), HOUR_S, 1, 0)) == 1


def test_seconds_within_a_cap_is_the_last_second_the_charge_stays_under_it():
    from decimal import Decimal

    from gpuplan.market import billing

    by_the_second = billing.per_second(Decimal(3600))  # ¥1 a second
    assert billing.seconds_within(lambda s: billing.charge(s, by_the_second), Decimal(10), 86400) == 10
    hourly = billing.Terms(Decimal(100), 3600, 3600, 3600)  # ¥100 an hour, every started hour billed
    # 1 s to 3,600 s cost ¥100, 3,601 s ¥200: a cap of ¥150 allows 3,600 s, ¥99 none past 0
    assert billing.seconds_within(lambda s: billing.charge(s, hourly), Decimal(150), 86400) == 3600
    assert billing.seconds_within(lambda s: billing.charge(s, hourly), Decimal(99), 86400) == 0
    assert billing.seconds_within(lambda s: billing.charge(s, hourly), Decimal(10 ** 6), 86400) == 86400  # the horizon
    assert billing.seconds_within(lambda s: Decimal(5) + s, Decimal(3), 100) == -1  # over the cap already
