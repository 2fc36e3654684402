"""The fault schedule is a function of the seed: the same seed draws the same rounds
(what a replay relies on), and pauses are longer than the broker session and replica lag
timeouts the runner configures. No broker runs here."""

import run


def test_a_seed_draws_the_same_schedule_again():
    a = run.draw_schedule(42, 20, run.FAULTS, [1, 2, 3])
    assert a == run.draw_schedule(42, 20, run.FAULTS, [1, 2, 3])
    assert a != run.draw_schedule(43, 20, run.FAULTS, [1, 2, 3])
    assert {r["fault"] for r in a} <= set(run.FAULTS)


def test_pauses_outlast_the_session_and_lag_timeouts():
    timeout_s = max(run.BROKER_CONFIG["broker.session.timeout.ms"], run.BROKER_CONFIG["replica.lag.time.max.ms"]) / 1000
    pauses = [r for seed in range(20) for r in run.draw_schedule(seed, 10, ["pause"], [1, 2, 3])]
    assert pauses and all(r["hold_s"] > timeout_s and r["node"] in (1, 2, 3) for r in pauses)


def test_a_rolling_restart_visits_every_node_once():
    rolling = run.draw_schedule(5, 3, ["rolling"], [1, 2, 3, 4, 5])
    assert all(sorted(r["order"]) == [1, 2, 3, 4, 5] for r in rolling)
