"""The budget ledger: reserve-before-launch, invariants (property-tested), persistence."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sixblanks.budgets.counters import COUNTERS, DISCARD_REASONS
from sixblanks.budgets.ledger import Budget, BudgetError, Ledger


def test_reserve_refuses_work_that_would_exceed_a_limit():
    led = Ledger(Budget({"launched_tokens": 100}))
    r = led.reserve({"launched_tokens": 60})
    assert r is not None and led.remaining("launched_tokens") == 40
    assert led.reserve({"launched_tokens": 41}) is None  # the reservation counts
    led.commit(r, {"launched_tokens": 35})
    assert led.counters["launched_tokens"] == 35 and led.remaining("launched_tokens") == 65
    with pytest.raises(BudgetError, match="exceeds the reservation"):
        led.commit(led.reserve({"launched_tokens": 10}), {"launched_tokens": 11})
    with pytest.raises(BudgetError, match="already committed"):
        led.commit(r, {"launched_tokens": 1})
    with pytest.raises(BudgetError, match="unknown counter 'tokens'"):
        led.reserve({"tokens": 1})
    with pytest.raises(BudgetError, match="unknown discard reason"):
        led.discard("boredom", 1)
    with pytest.raises(BudgetError, match="must be a finite number > 0"):
        Budget({"launched_tokens": 0})


def test_snapshot_and_state_round_trip():
    led = Ledger(Budget({"launched_tokens": 100, "verifier_calls": 10}))
    led.commit(
        led.reserve({"launched_tokens": 50, "verifier_calls": 4}),
        {"launched_tokens": 40, "verifier_calls": 4},
    )
    led.discard("dynamic_sampling", 15, 2)
    led.add({"accepted_tokens": 25, "device_seconds": 1.5})
    snap = led.snapshot(0)
    assert snap["launched_tokens"] == 40 and snap["discarded_tokens.dynamic_sampling"] == 15
    back = Ledger.from_state(led.state_dict())
    assert back.counters == led.counters and back.discarded_by_reason == led.discarded_by_reason
    assert back.snapshots == led.snapshots and not back.check_invariants()


ops = st.lists(
    st.one_of(
        st.tuples(st.just("launch"), st.floats(0, 50), st.floats(0, 1), st.floats(0, 1)),
        st.tuples(st.just("add_time"), st.floats(0, 10), st.just(0.0), st.just(0.0)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(ops, st.floats(1, 500), st.sampled_from(DISCARD_REASONS))
def test_invariants_hold_for_any_sequence_of_work(operations, limit, reason):
    led = Ledger(Budget({"launched_tokens": limit}))
    prev = dict(led.counters)
    for kind, amount, accept_frac, _ in operations:
        if kind == "launch":
            res = led.reserve({"launched_tokens": amount})
            if res is None:
                assert (
                    led.counters["launched_tokens"] + amount > limit
                )  # refused only when it would not fit
                continue
            actual = amount * 0.9
            led.commit(res, {"launched_tokens": actual, "rollouts_launched": 1})
            accepted = actual * accept_frac
            led.add({"accepted_tokens": accepted, "rollouts_accepted": 1 if accepted > 0 else 0})
            led.discard(reason, actual - accepted, 0 if accepted > 0 else 1)
        else:
            led.add({"device_seconds": amount})
        # counters never decrease, no limit is ever exceeded
        assert all(led.counters[k] >= prev[k] - 1e-9 for k in COUNTERS)
        assert led.counters["launched_tokens"] <= limit + 1e-9
        prev = dict(led.counters)
    assert not led.check_invariants()
    assert led.counters["accepted_tokens"] <= led.counters["launched_tokens"] + 1e-9
    assert math.isclose(
        sum(led.discarded_by_reason.values()), led.counters["discarded_tokens"], abs_tol=1e-6
    )
    assert math.isclose(
        led.counters["accepted_tokens"] + led.counters["discarded_tokens"],
        led.counters["launched_tokens"],
        abs_tol=1e-6,
    )


def test_fits_checks_the_counters_asked_for():
    """A measured time counter past its limit refuses new time-estimated work, not the token-only
    work of a step admitted before (its time is measured, not reserved)."""

    led = Ledger(Budget({"launched_tokens": 100, "device_seconds": 10}))
    led.add({"device_seconds": 12.0})  # measured: time may overrun
    assert led.fits({"launched_tokens": 50})
    assert not led.fits({"launched_tokens": 50, "device_seconds": 0.0})
    assert led.reserve({"launched_tokens": 50}) is not None
    assert led.reserve({"device_seconds": 0.0}) is None


def test_a_launched_token_neither_accepted_nor_discarded_breaks_the_invariants():
    led = Ledger(Budget({}))
    led.add({"launched_tokens": 10.0, "accepted_tokens": 6.0})
    led.discard("failed", 3.0, 1)
    (problem,) = led.check_invariants()
    assert problem.startswith("launched_tokens 10 != accepted 6 + discarded 3")
    led.discard("dis", 1.0)
    assert not led.check_invariants()


def test_every_event_is_numbered_sunk_and_checked_and_a_violation_names_its_event():
    got = []
    led = Ledger(Budget({"launched_tokens": 100}), sink=got.append)
    led.commit(led.reserve({"launched_tokens": 40}, "a"), {"launched_tokens": 30})
    led.discard("failed", 5, 1)
    assert [e["seq"] for e in got] == [0, 1, 2] and [e["type"] for e in got] == [
        "reserve", "commit", "discard"
    ]  # fmt: skip
    led.counters["launched_tokens"] -= 10  # a bug elsewhere that lowers a counter
    with pytest.raises(
        BudgetError, match=r"event .*'seq': 3.*launched_tokens decreased from 30 to 20"
    ):
        led.add({"env_steps": 1}, "next")
    assert got[-1]["seq"] == 3 and got[-1]["violation"] == [
        "launched_tokens decreased from 30 to 20"
    ]
    led = Ledger(Budget({"verifier_calls": 3}))
    led.counters["verifier_calls"] = 5  # past its limit, behind the ledger's back
    with pytest.raises(BudgetError, match="verifier_calls = 5 exceeds its limit 3"):
        led.add({"env_steps": 1})
    # a resumed ledger continues the numbering and checks from its restored counters
    led = Ledger(Budget({"launched_tokens": 100}))
    led.add({"env_steps": 2})
    back = Ledger.from_state(led.state_dict())
    back.sink = got.append
    back.add({"env_steps": 1})
    assert got[-1]["seq"] == 1 and back.counters["env_steps"] == 3


def test_lost_work_is_charged_and_its_launched_tokens_discarded_as_restart():
    led = Ledger(Budget({"launched_tokens": 100}))
    lost = {"launched_tokens": 40.0, "accepted_tokens": 30.0, "discarded_tokens": 10.0,
            "rollouts_launched": 8.0, "rollouts_accepted": 6.0, "device_seconds": 2.5,
            "verifier_calls": 8.0, "optimizer_steps": 2.0}  # fmt: skip
    led.charge_lost(lost, 8.0)
    c = led.counters
    assert c["launched_tokens"] == 40 and c["accepted_tokens"] == 0 and c["discarded_tokens"] == 40
    assert c["rollouts_launched"] == 8 and c["rollouts_accepted"] == 0
    assert c["device_seconds"] == 2.5 and c["verifier_calls"] == 8 and c["optimizer_steps"] == 2
    assert (
        led.discarded_by_reason["restart"] == 40
        and led.discarded_rollouts_by_reason["restart"] == 8
    )
    assert led.remaining("launched_tokens") == 60 and led.check_invariants() == []


def test_the_ledger_log_replays_to_the_counters_across_a_resume_and_a_torn_line(tmp_path):
    """ledger.jsonl, append-only: a resume record supersedes the events after the checkpoint; a
    line torn by a kill is skipped; the standing events add up to the resumed ledger's counters."""

    from sixblanks.harness.ledgerlog import (
        LedgerLog,
        compare,
        effective_events,
        read_events,
        replay,
    )

    path = tmp_path / "ledger.jsonl"
    led = Ledger(Budget({"launched_tokens": 100}), sink=LedgerLog(path))
    led.commit(led.reserve({"launched_tokens": 20}), {"launched_tokens": 20, "env_steps": 4})
    at_checkpoint = led.state_dict()
    led.commit(led.reserve({"launched_tokens": 30}), {"launched_tokens": 30})  # redone on resume
    led.discard("failed", 30, 2)
    led.sink.close()
    with open(path, "a") as f:
        f.write('{"type": "commit", "amo')  # the kill cut this line short
    back = Ledger.from_state(at_checkpoint)
    log = LedgerLog(path)
    log.resume(back.seq, 1)
    back.sink = log
    back.commit(back.reserve({"launched_tokens": 10}), {"launched_tokens": 10})
    log.close()
    records = read_events(path)
    assert [r["type"] for r in records].count("resume") == 1
    standing = effective_events(records)
    assert [e["seq"] for e in standing] == [0, 1, 2, 3]
    r = replay(standing)
    assert r["counters"] == {"launched_tokens": 30.0, "env_steps": 4.0}
    assert r["discarded_by_reason"] == {}
    assert compare(r["counters"], back.counters) == []
    assert compare(replay(records)["counters"], back.counters) == [
        "discarded_tokens: events add up to 30, the ledger says 0",
        "launched_tokens: events add up to 60, the ledger says 30",
    ]  # without the resume record the superseded events would count twice
