"""The budget ledger: reserve-before-launch, invariants (property-tested), persistence."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sixblanks.budgets.counters import COUNTERS, DISCARD_REASONS
from sixblanks.budgets.ledger import TIME_COUNTERS, TIME_TOLERANCE, Budget, BudgetError, Ledger


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


# Work as the ledgers see it: ("launch", worst-case tokens, fraction of it spent, fraction of that
# accepted) or ("add_time", seconds). Token amounts are whole; fractions are turned into whole
# amounts the way the harness counts them (tokens are counted, never scaled).
ops = st.lists(
    st.one_of(
        st.tuples(st.just("launch"), st.integers(0, 50), st.floats(0, 1), st.floats(0, 1)),
        st.tuples(st.just("add_time"), st.floats(0, 10), st.just(0.0), st.just(0.0)),
    ),
    max_size=40,
)

LEDGERS = {
    # the run ledger: tokens and device time limited, as an experiment's budget does
    "run": lambda limit: Ledger(Budget({"launched_tokens": limit, "device_seconds": limit / 7})),
    # the evaluation ledger: no limits, it only counts (the trainer's eval meter)
    "evaluation": lambda limit: Ledger(),
}


@pytest.mark.parametrize("kind", sorted(LEDGERS))
@given(operations=ops, limit=st.integers(1, 500), reason=st.sampled_from(DISCARD_REASONS))
def test_invariants_hold_for_any_sequence_of_work(kind, operations, limit, reason):
    """Any sequence of reserved, committed, accepted and discarded work: counters never decrease,
    no limit is passed, unit counters stay exact ints (launched = accepted + discarded with no
    tolerance), and a refusal happens only when the work would not fit."""

    led = LEDGERS[kind](limit)
    prev = dict(led.counters)
    for op, amount, spent_frac, accept_frac in operations:
        if op == "launch":
            before = led.remaining("launched_tokens")
            res = led.reserve({"launched_tokens": amount})
            if res is None:
                assert amount > before  # refused only when it would not fit
                continue
            actual = math.floor(amount * spent_frac)
            led.commit(res, {"launched_tokens": actual, "rollouts_launched": 1})
            accepted = math.floor(actual * accept_frac)
            led.add({"accepted_tokens": accepted, "rollouts_accepted": 1 if accepted > 0 else 0})
            led.discard(reason, actual - accepted, 0 if accepted > 0 else 1)
        elif led.fits({"device_seconds": amount}):
            led.add({"device_seconds": amount})
        else:
            assert led.remaining("device_seconds") + TIME_TOLERANCE < amount
        assert all(led.counters[k] >= prev[k] for k in COUNTERS)
        assert led.counters["launched_tokens"] <= led.budget.limits.get("launched_tokens", math.inf)
        assert led.counters["device_seconds"] <= limit / 7 + TIME_TOLERANCE or kind != "run"
        assert all(type(led.counters[k]) is int for k in COUNTERS if k not in TIME_COUNTERS)
        assert led.exhausted() == (
            kind == "run"
            and (
                led.remaining("launched_tokens") <= 0
                or led.remaining("device_seconds") <= TIME_TOLERANCE
            )
        )
        prev = dict(led.counters)
    assert not led.check_invariants()
    c = led.counters
    assert c["accepted_tokens"] + c["discarded_tokens"] == c["launched_tokens"]  # exactly
    assert sum(led.discarded_by_reason.values()) == c["discarded_tokens"]


def test_unit_counters_refuse_fractions_and_keep_exact_ints():
    """Tokens, rollouts, calls and steps are counted in whole units: a fractional amount or limit
    is refused by name; integral floats (a JSON round trip, a tensor's .item()) become ints, so a
    remainder is never a floating-point residue."""

    led = Ledger(Budget({"launched_tokens": 50.0, "device_seconds": 2.5}))
    assert type(led.budget.limits["launched_tokens"]) is int
    with pytest.raises(BudgetError, match=r"launched_tokens: counts whole units \(got 49.99"):
        led.reserve({"launched_tokens": 50 * 0.9999999999999999})
    with pytest.raises(BudgetError, match=r"budget.launched_tokens: counts whole units"):
        Budget({"launched_tokens": 10.5})
    with pytest.raises(BudgetError, match=r"discard 'failed': tokens: counts whole units"):
        led.discard("failed", 0.5)
    led.commit(led.reserve({"launched_tokens": 50.0}), {"launched_tokens": 49.0})
    assert led.remaining("launched_tokens") == 1 and type(led.counters["launched_tokens"]) is int
    assert not led.exhausted()
    led.commit(led.reserve({"launched_tokens": 1}), {"launched_tokens": 1})
    assert led.exhausted() and led.reserve({"launched_tokens": 1}) is None
    # time is measured: compared with a tolerance, time left below it counts as none
    led = Ledger(Budget({"device_seconds": 50.0}))
    led.add({"device_seconds": 50 * 0.9999999999999999})
    assert 0 < led.remaining("device_seconds") < TIME_TOLERANCE
    assert led.exhausted() and not led.has_left("device_seconds")
    # a state written before counts were ints (integral floats) resumes as exact ints
    back = Ledger.from_state(
        {
            "limits": {"launched_tokens": 100.0},
            "counters": {"launched_tokens": 40.0},
            "discarded_by_reason": {"failed": 3.0},
            "n_events": 2,
        }
    )
    assert type(back.counters["launched_tokens"]) is int and back.remaining("launched_tokens") == 60
    assert type(back.discarded_by_reason["failed"]) is int


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
        "reserve",
        "commit",
        "discard",
    ]
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
    lost = {
        "launched_tokens": 40.0,
        "accepted_tokens": 30.0,
        "discarded_tokens": 10.0,
        "rollouts_launched": 8.0,
        "rollouts_accepted": 6.0,
        "device_seconds": 2.5,
        "verifier_calls": 8.0,
        "optimizer_steps": 2.0,
    }
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

    from sixblanks.harness.orchestration.ledgerlog import (
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
