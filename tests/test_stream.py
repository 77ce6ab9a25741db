"""Asynchrony one group at a time (data.concurrent.consume: episode): each group handed over the
moment it finishes, partial rollouts on a weight update (continue, resume, regenerate), a version
on every token, staleness split and bounded by where it passed, and a ledger that balances."""

import collections
import json
import os
import signal

import pytest
import torch

from sixblanks.algorithms.presets import resolve
from sixblanks.harness import checkpoint
from sixblanks.harness.layout import RunDir
from sixblanks.harness.rollout.agent import Episode, episodes_to_batch
from sixblanks.harness.rollout.trajectory import TrajectoryBatch
from sixblanks.harness.tasks import make_task
from sixblanks.harness.tasks.base import Instance

from .test_orchestrator import TINY as TINY_RUN

TAIL = ("chain_arithmetic", {"steps": 8, "tail": 1.5})


def _trainer(over, preset="grpo", budget=None, task=TAIL):
    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.models import load_pretrained
    from sixblanks.harness.orchestration.spawning import helper_context
    from sixblanks.harness.training import RunSettings, Trainer

    from .golden.record import CONFIG, INITIAL_DIR

    torch.set_num_threads(1)
    cfg = validate_mapping(CONFIG)
    model, tok = load_pretrained(INITIAL_DIR, "cpu", "float32")
    s = RunSettings(
        blanks=resolve(preset, over),
        rollout=cfg.rollout,
        optimizer=cfg.optimizer,
        budget=dict(budget or {"launched_tokens": 900.0}),
        seed=0,
        eval_size=8,
        name=preset,
        process_context=helper_context,  # the collector forked from the fork server, as a run's
    )
    return Trainer(s, make_task(*task), model, tok)


def stream(partial="continue", **more):
    return {
        "concurrent": {
            "queue": 2,
            "keep_spool": True,
            "consume": "episode",
            "partial": partial,
            **more,
        }
    }


def test_a_token_version_per_action_token_and_the_span_of_each_sample():
    """Two episodes by hand: one sampled entirely by version 3, one whose first action came from
    version 2 and second from version 4 (resumed across two updates)."""

    class Tok:
        pad_token_id = 0

    inst = Instance(0, "p", {})
    a, b = Episode(inst, 0, None), Episode(inst, 0, None)
    a.add("obs", [5, 6])
    a.add("action", [7], [-0.1], 0, 3)
    b.add("obs", [5])
    b.add("action", [8, 9], [-0.2, -0.3], 0, 2)
    b.add("obs", [4])
    b.add("action", [1], [-0.4], 1, 4)
    for ep in (a, b):
        ep.actions = ["x"] * (1 + (ep is b))
    batch = episodes_to_batch([a, b], Tok(), 9, "t")
    assert batch.token_versions.tolist() == [[-1, -1, 3, -1, -1], [-1, 2, 2, -1, 4]]
    assert batch.policy_version.tolist() == [3, 2]  # the oldest token's
    assert batch.version_span().tolist() == [0, 2]
    both = TrajectoryBatch.concat([batch.select([1]), batch.select([0])])
    assert both.version_span().tolist() == [2, 0] and both.token_versions.shape == (2, 5)
    # a batch built without them: every action token has its row's version
    kw = {f: getattr(batch, f) for f in TrajectoryBatch._TENSORS if f != "token_versions"}
    plain = TrajectoryBatch(**kw, segments=batch.segments)
    assert plain.token_versions.tolist() == [[-1, -1, 3, -1, -1], [-1, 2, 2, -1, 2]]


def test_the_long_tailed_chain_draws_its_lengths_from_the_power_law():
    task = make_task("chain_arithmetic", {"steps": 6, "tail": 1.5})
    counts = collections.Counter(len(task.make_instance(s).data["ops"]) for s in range(6000))
    z = sum(k**-1.5 for k in range(1, 7))
    for k in range(1, 7):  # within 4 standard errors of k^-1.5 / z
        p = k**-1.5 / z
        assert abs(counts[k] / 6000 - p) < 4 * (p * (1 - p) / 6000) ** 0.5, k
    fixed = make_task("chain_arithmetic", {"steps": 6})
    assert {len(fixed.make_instance(s).data["ops"]) for s in range(50)} == {6}
    env = task.make_env(task.make_instance(3), lambda i, r: 1.0)
    env.reset(seed=3)
    steps = len(task.make_instance(3).data["ops"])
    env.turn = 1
    assert env.potential() == pytest.approx(1 / steps)  # progress along this chain, not the cap


def _core(tmp_path, partial):
    from sixblanks.harness.training.collectors.spool import Spool
    from sixblanks.harness.training.collectors.stream_worker import StreamCore
    from sixblanks.harness.training.collectors.worker import collector_init

    tr = _trainer({"data": stream(partial)})
    spool = Spool(str(tmp_path), keep=True)
    core = StreamCore(collector_init(tr.ctx, spool.path, "w0"))
    core.announce(0, str(spool.write_weights(tr.model, 0, None)))
    assert core.take_weights() == [] and core.version == 0

    def new_weights(v):
        with torch.no_grad():
            for p in tr.model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        core.announce(v, str(spool.write_weights(tr.model, v, v - 1)))

    def request(r, seed):
        return {"round": r, "seeds": [seed], "group_offset": r, "gen_seed": 0, "min_version": 0}

    return core, new_weights, request


def _finish(core, msgs, turn0=0):
    """Turns until nothing is in flight: {unit: (turn it was reported at, its spool record)}."""

    done, t = {}, turn0
    while core.units or core.waiting:
        t += 1
        for kind, r, name in core.take_weights() + core.start() + core.turn():
            if kind in ("done", "aborted"):
                done[r] = (t, kind, checkpoint.load_record(core.spool / name))
    return done


def test_each_group_is_reported_the_turn_its_last_episode_ends(tmp_path):
    core, _, request = _core(tmp_path, "continue")
    core.waiting = [request(r, 100 + r) for r in range(6)]
    assert [m[0] for m in core.start()] == ["started"] * 6
    done = _finish(core, [])
    assert sorted(done) == list(range(6))
    for t, kind, rec in done.values():
        b = rec["batch"]
        assert kind == "done" and int(b.n_turns.max()) == t  # not held for the longest group
        assert rec["cost"]["env_steps"] == float(b.n_turns.sum())
        assert rec["cost"]["verifier_calls"] == float(b.terminated.sum())  # the last step verifies
    assert len({t for t, _, _ in done.values()}) > 1  # the lengths differ: groups left apart
    # the device time of the turns, split over the episodes in them: no unit got none
    assert all(rec["device_seconds"] > 0 for _, _, rec in done.values())


def _two_turn_units(core, request, seeds=range(200, 260)):
    """Requests whose every chain has at least 3 steps (so that they are in flight after a turn)."""

    task = core.init["task"]
    long = [s for s in seeds if len(task.make_instance(s).data["ops"]) >= 3][:3]
    core.waiting = [request(r, s) for r, s in enumerate(long)]
    core.start()
    core.turn()  # one action each: every unit is in flight with its first turn done
    return {r: u for r, u in core.units.items()}


def test_resume_keeps_the_tokens_and_tags_each_with_its_version(tmp_path):
    core, new_weights, request = _core(tmp_path, "resume")
    flight = _two_turn_units(core, request)
    first = {r: [list(ep.logps) for ep in u.episodes] for r, u in flight.items()}
    new_weights(1)
    done = _finish(core, [])
    assert core.version == 1
    spans = []
    for r, (_, kind, rec) in done.items():
        b = rec["batch"]
        assert kind == "done" and rec["version"] == 1 and int(b.policy_version.min()) == 0
        for i in range(b.size):
            acts = [(s, e) for k, s, e in b.segments[i] if k == "action"]
            s0, e0 = acts[0]
            assert set(b.token_versions[i, s0:e0].tolist()) == {0}  # kept, with its version
            assert b.behavior_logprobs[i, s0:e0].tolist() == pytest.approx(first[r][i][s0:e0])
            later = {v for s, e in acts[1:] for v in b.token_versions[i, s:e].tolist()}
            assert later <= {1}
            spans.append((int(b.version_span()[i]), bool(later)))
    assert all(span == int(later) for span, later in spans) and any(x for _, x in spans)


def test_regenerate_aborts_what_is_in_flight_and_continue_lets_it_finish(tmp_path):
    core, new_weights, request = _core(tmp_path / "r", "regenerate")
    flight = _two_turn_units(core, request)
    core.waiting = [request(7, 777)]
    assert [m[0] for m in core.start()] == ["started"]  # started, not yet acted
    new_weights(1)
    msgs = core.take_weights()
    assert [(k, r) for k, r, _ in msgs] == [("aborted", r) for r in sorted(flight)]
    # a group with no action yet has nothing sampled by the old weights: it goes on, on the new
    assert list(core.units) == [7] and core.version == 1
    fresh = _finish(core, [])
    assert fresh[7][1] == "done"
    assert set(fresh[7][2]["batch"].token_versions.flatten().tolist()) == {-1, 1}
    for _, _r, name in msgs:
        rec = checkpoint.load_record(core.spool / name)
        b = rec["batch"]
        assert rec["aborted"] and b.n_turns.tolist() == [1] * b.size  # one turn, then aborted
        assert rec["cost"]["launched_tokens"] == float(b.row_action_tokens().sum())

    core, new_weights, request = _core(tmp_path / "c", "continue")
    flight = _two_turn_units(core, request)
    new_weights(1)
    assert core.take_weights() == [] and core.version == 0  # in flight: the old weights stay
    core.waiting = [request(9, 999)]
    assert core.start() == []  # nothing starts while the sync waits for what is in flight
    done = _finish(core, [])
    assert set(flight) <= set(done) and core.version == 1
    for r in flight:
        assert set(done[r][2]["batch"].token_versions.flatten().tolist()) <= {-1, 0}
    assert 9 in done and int(done[9][2]["batch"].policy_version.min()) == 1  # started on v1


def spool_totals(spool) -> dict[str, float]:
    """What the spooled groups launched, recomputed from their trajectories (a second method: the
    ledger's counts come from the costs the collector reported); on a chain, only the last step
    calls the verifier."""

    tot = collections.Counter()
    for f in sorted(spool.glob("round-*.pt")):
        b = checkpoint.load_record(f)["batch"]
        tot["launched_tokens"] += float(b.row_action_tokens().sum())
        tot["rollouts_launched"] += b.size
        tot["env_steps"] += float(b.n_turns.sum())
        tot["verifier_calls"] += float(b.terminated.sum())
    return tot


def assert_balanced(counters, by_reason, spool):
    for k, v in spool_totals(spool).items():
        assert counters[k] == pytest.approx(v), k
    assert counters["accepted_tokens"] + counters["discarded_tokens"] == counters["launched_tokens"]
    rejected = sum(by_reason.values())
    assert counters["rollouts_accepted"] + rejected == counters["rollouts_launched"]


# long chains (each step 10 ms) outlast an update: units started before it would pass it in flight
SLOW = (TAIL[0], {**TAIL[1], "step_seconds": 0.01})
# room for a queue of worst-case reservations, so that the budget never limits the units running
ROOMY = {"launched_tokens": 6000.0}


def record_top_ups(tr) -> list[tuple[int, float, int]]:
    """After each of the stream's launch decisions: (versions trained since it started, units
    accepted by the ledger, units running). The ledger commits a batch at its update, so a top-up
    between taking a batch and the update counts one batch fewer than the collector does; the
    top-up at a step's start counts the same."""

    col, G, seen = tr.collector, tr.settings.rollout.group_size, []
    real = col.top_up

    def top_up():
        real()
        i = tr.ctx.engine.policy_version - col.units.version0
        seen.append((i, tr.ledger.counters["rollouts_accepted"] / G, len(col.requests)))

    col.top_up = top_up
    return seen


def test_wait_bounds_hold_both_parts(tmp_path):
    """In flight bounded at 0 versions and in the queue at 1, both with ``wait``, a queue of three
    batches and chains that outlast an update: the trainer idles for the stragglers before each
    update (none passes one in flight), and the producer launches no more than (1 + 1) batches, so
    each batch waits one update in the queue and none two. Nothing is ever past a bound, nothing
    is dropped for it, and each bound is the one that holds: without the first, units still in
    flight at an update would pass it; without the second, the third batch launched would wait two
    updates."""

    over = {
        "data": stream(
            "resume",
            queue=3,
            inflight={"versions": 0, "on_pass": "wait"},
            queued={"versions": 1, "on_pass": "wait"},
        )
    }
    tr = _trainer(over, budget=ROOMY, task=SLOW)
    tr.ctx.settings.work_dir = str(tmp_path)
    B = tr.settings.rollout.prompts_per_step
    seen = record_top_ups(tr)
    res = tr.train(max_steps=4)
    led = res.ledger
    assert not led.check_invariants()
    trained = [m for m in res.steps if "lag.inflight_behind_max" in m]
    assert len(trained) == 4
    assert all(m["lag.inflight_behind_max"] == 0 for m in trained)
    assert all(m["lag.queue_behind_max"] <= 1 for m in trained)
    assert any(m["lag.queue_behind_max"] == 1 for m in trained)  # the queue bound was reached
    # by the tokens' own version tags, where the batch is trained on: the two parts' sum
    assert all(m["lag.kept_behind_max"] <= 1 for m in trained)
    for reason in ("stale_inflight", "stale_queue", "staleness"):
        assert led.discarded_rollouts_by_reason[reason] == 0
    # the queue bound's admission: at most (1 + 1) B running, where the queue would take 3 B
    assert seen and all(running <= 2 * B for _, _, running in seen)
    assert any(running == 2 * B for _, _, running in seen)
    assert any(m.get("async.hold_seconds", 0) > 0 for m in res.steps)
    assert_balanced(led.counters, led.discarded_rollouts_by_reason, tmp_path / "spool")


def test_drop_bounds_discard_each_part_past_its_bound(tmp_path):
    """In flight and in the queue each bounded at 0 versions with ``drop`` (two batches launched
    ahead, finishing on their first weights): a unit that finished after an update it started
    before is dropped as ``stale_inflight``, one that finished before an update and was consumed
    after it as ``stale_queue``; what is trained on is never behind, by its tokens' own version
    tags (the trainer's version minus the oldest tag, measured where the batch is trained on)."""

    zero = {"versions": 0, "on_pass": "drop"}
    over = {"data": stream("continue", inflight=zero, queued=zero)}
    tr = _trainer(over, budget={"launched_tokens": 500.0}, task=SLOW)
    tr.ctx.settings.work_dir = str(tmp_path)
    res = tr.train()
    led = res.ledger
    assert not led.check_invariants() and res.ended_because == "budget"
    assert led.discarded_rollouts_by_reason["stale_inflight"] > 0
    assert led.discarded_rollouts_by_reason["stale_queue"] > 0
    trained = [m for m in res.steps if "lag.kept_behind_max" in m]
    assert trained and all(m["lag.kept_behind_max"] == 0 for m in trained)
    assert_balanced(led.counters, led.discarded_rollouts_by_reason, tmp_path / "spool")


def test_admission_holds_the_launched_total_to_the_staleness_bound(tmp_path):
    """AReaL's rule alone (no part bounded, a queue of 4 batches, a budget with room for them):
    with ``data.staleness`` eta = 1 and the trainer i versions in, at most (eta + i + 1) B units
    are launched and not dropped (accepted + running), B = prompts_per_step, where the queue alone
    would launch 4 B from the start. At each step's start the rule launches up to that bound
    exactly: a unit dropped for staleness (``resume``: a long chain launched first can finish after
    two batches of later ones) frees its place. Counted from the ledger's accepted rows after
    every launch decision."""

    eta, queue = 1, 4
    over = {"data": {**stream("resume", queue=queue), "staleness": eta}}
    tr = _trainer(over, budget=ROOMY, task=SLOW)
    tr.ctx.settings.work_dir = str(tmp_path)
    B = tr.settings.rollout.prompts_per_step
    seen = record_top_ups(tr)
    res = tr.train(max_steps=5)
    led = res.ledger
    assert not led.check_invariants() and len(res.steps) >= 5
    for i, accepted, running in seen:
        assert accepted + running <= (eta + i + 1) * B, (i, accepted, running)
    starts = [next(x for x in seen if x[0] == i) for i in sorted({x[0] for x in seen})]
    assert len(starts) == 5
    for i, accepted, running in starts:  # the rule, not the queue, stopped these launches
        assert running < queue * B and accepted + running == (eta + i + 1) * B, (i, accepted)
    assert led.discarded_rollouts_by_reason["staleness"] > 0
    trained = [m for m in res.steps if "lag.kept_behind_max" in m]
    assert trained and all(m["lag.kept_behind_max"] <= eta for m in trained)
    assert sum(m.get("async.admission_waits", 0) for m in res.steps) > 0
    assert_balanced(led.counters, led.discarded_rollouts_by_reason, tmp_path / "spool")


def test_sao_consumes_each_rollout_when_it_finishes_with_two_critic_steps_and_dis(tmp_path):
    """Four batches launched at once on the first weights (and finishing on them: ``continue``)
    are consumed one, two and three versions later, so there is drift for DIS to cut; the band
    is narrowed to 0.9 < rho < 1.1 so that the cut cannot depend on how far this tiny run drifts."""

    tr = _trainer(
        {
            "data": {"concurrent": {"queue": 4, "consume": "episode", "keep_spool": True}},
            "weight": {"eps_low": 0.1, "eps_high": 0.1},
        },
        preset="sao",
        budget={"launched_tokens": 700.0},
    )
    tr.ctx.settings.work_dir = str(tmp_path)
    res = tr.train()
    trained = [m for m in res.steps if m.get("optimizer_steps")]
    assert trained and all(m["critic_optimizer_steps"] == 2 * m["optimizer_steps"] for m in trained)
    led = res.ledger
    assert led.discarded_by_reason["dis"] > 0 and not led.check_invariants()
    units = list((tmp_path / "spool").glob("round-*.pt"))
    assert all(checkpoint.load_record(f)["batch"].size == 1 for f in units)  # one rollout a unit
    assert led.counters["rollouts_launched"] == len(units)
    assert max(m.get("lag.versions_behind_max", 0) for m in res.steps) >= 3


@pytest.mark.slow
def test_a_killed_streaming_trainer_resumes_and_counts_every_group_once(tmp_path):
    """Regenerate with a queue bound that drops: SIGKILL mid-run, resume; aborted, dropped and
    unconsumed groups all balance the ledger, recounted from the spool."""

    from sixblanks.harness.orchestration.runner import execute_run

    from .test_async import killed_at_step

    # four batches launched at once: the groups still in flight at an update are aborted, the
    # ones that finished during it are dropped for waiting across it
    drop = {"versions": 0, "on_pass": "drop"}
    blanks = {"data": stream("regenerate", queued=drop, queue=4)}
    cfg = {
        **TINY_RUN,
        "name": "tiny-stream",
        "task": {"name": TAIL[0], "params": {**TAIL[1], "step_seconds": 0.004}},
        "budget": {"launched_tokens": 1500},
        "eval": {"every": 600},
        "seeds": [0],
        "arms": {"stream": {"preset": "grpo", "blanks": blanks}},
        "tracking": {"mlflow": False},
    }
    spec, run_dir, warm = killed_at_step(cfg, tmp_path, 4)
    resumed = execute_run(spec, run_dir, warm, threads=1)
    assert resumed["resumed_from"] is not None and resumed["ended_because"] == "budget"
    rd = RunDir(run_dir)
    ledger = checkpoint.load(rd.checkpoint)["meter"]["ledger"]
    by_reason = ledger["discarded_rollouts_by_reason"]
    assert_balanced(resumed["counters"], by_reason, run_dir / "spool")
    aborted = [checkpoint.load_record(f) for f in (run_dir / "spool").glob("round-*.pt")]
    aborted = [rec["batch"].size for rec in aborted if rec["aborted"]]
    assert by_reason["aborted"] == sum(aborted) > 0 and by_reason["stale_queue"] > 0
    final = checkpoint.load(rd.checkpoint)["collector"]
    assert set(final["counted"]) == {f.name for f in (run_dir / "spool").glob("round-*.pt")}


def test_the_reports_asynchrony_table_by_hand():
    """Two runs of one streaming arm and a synchronous arm: the split's mean over steps / largest
    step max, the spans, and each reason's share of the arm's launched tokens."""

    import polars as pl

    from sixblanks.reports.data import Data
    from sixblanks.reports.lag import DROPS, async_blocks

    streaming = json.dumps({"data": {"concurrent": {"queue": 2, "consume": "episode"}}})
    runs = pl.DataFrame(
        {"run_id": ["a", "b", "s"], "arm": ["x", "x", "sync"], "blanks": [streaming] * 2 + ["{}"]}
    )
    rows = []
    for run, values in (("a", (1.0, 3.0)), ("b", (2.0, 2.0))):
        for step, v in enumerate(values):
            for name, value in (
                ("lag.inflight_behind", v),
                ("lag.inflight_behind_max", v + 1),
                ("lag.queue_behind", v / 2),
                ("lag.queue_behind_max", v),
                ("lag.version_span", 0.5),
                ("lag.version_span_max", 1.0),
            ):
                rows.append((run, step, name, value))
    lag = pl.DataFrame(rows, schema=["run_id", "step", "name", "value"], orient="row")
    ledger = {"run_id": ["a", "b", "s"], "launched_tokens": [600.0, 400.0, 500.0]}
    ledger |= {f"discarded_{r}": [0.0, 0.0, 0.0] for r in DROPS}
    ledger["discarded_aborted"] = [30.0, 20.0, 0.0]
    ledger["discarded_stale_queue"] = [0.0, 10.0, 0.0]
    empty = pl.DataFrame()
    d = Data("t", {}, runs, empty, empty, pl.DataFrame(ledger), empty, empty, None, None)
    d.lag, d.arms = lag, ["x", "sync"]
    table = async_blocks(d)[-1]
    assert [r[0] for r in table.rows] == ["x"]  # the synchronous arm has no row
    row = dict(zip(table.header, table.rows[0]))
    assert row["in flight (mean / max)"] == "2.00 / 4.00"  # mean of 1, 3, 2, 2; max of v + 1
    assert row["in the queue (mean / max)"] == "1.00 / 3.00"
    assert row["version span (mean / max)"] == "0.50 / 1.00"
    assert row["dropped: aborted"] == "50 (5.0%)"  # of 1000 launched
    assert row["dropped: stale_queue"] == "10 (1.0%)" and row["dropped: staleness"] == "0 (0.0%)"


def test_a_killed_streaming_collector_is_restarted_and_every_group_counted_once(tmp_path):
    """SIGKILL the collector at step 2: what it spooled and never reported is used or, aborted,
    charged and launched again; the rest in flight is launched again; the spool balances."""

    killed = []

    def kill(tr, m):
        if m["step"] == 2:
            os.kill(tr.collector.worker.pid, signal.SIGKILL)
            killed.append(tr.collector.worker.pid)

    slow = (TAIL[0], {**TAIL[1], "step_seconds": 0.004})
    tr = _trainer({"data": stream("regenerate", queue=3)}, task=slow)
    tr.ctx.settings.work_dir = str(tmp_path)
    res = tr.train(on_step=kill)
    led = res.ledger
    assert killed and res.steps[-1]["async.restarts"] == 1.0
    assert not led.check_invariants() and res.ended_because == "budget"
    assert_balanced(led.counters, led.discarded_rollouts_by_reason, tmp_path / "spool")
    files = {f.name for f in (tmp_path / "spool").glob("round-*.pt")}
    assert tr.collector.counted == files
    assert len({f.split(".")[1] for f in files}) == 2  # groups of both collectors were used
    # each aborted group is launched again, the same prompts under a later round (or waits for
    # room in the budget when the run ends)
    units = [checkpoint.load_record(tmp_path / "spool" / f) for f in files]

    def prompts(b):
        return tuple(sorted(set(zip(b.instance_seeds.tolist(), b.group_ids.tolist()))))

    aborted = [(u["round"], prompts(u["batch"])) for u in units if u["aborted"]]
    assert aborted
    waiting = {
        tuple(sorted((s, q["group_offset"] + i) for i, s in enumerate(q["seeds"])))
        for q in tr.collector.units.relaunch
    }
    for r, p in aborted:
        again = any(u["round"] > r and prompts(u["batch"]) == p for u in units)
        assert again or p in waiting, (r, p)
