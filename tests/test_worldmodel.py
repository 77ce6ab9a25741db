"""A learned world model: real transitions extracted by hand, the model's held-out
prediction error falling as it trains on real transitions, imagined episodes that never touch the
verifier, and the ledger's imagined/real env-step split recounted from the batches."""

import copy

import pytest
import torch

from sixblanks.algorithms.presets import resolve
from sixblanks.harness.training.meter import UNIT_KINDS

from .test_search import _Bisect


@pytest.fixture(scope="module")
def guess4():
    from sixblanks.harness.config import ModelConfig
    from sixblanks.harness.models import load_policy
    from sixblanks.harness.tasks import make_task

    task = make_task("guess_number", {"low": 1, "high": 8, "max_turns": 4})
    torch.manual_seed(0)
    model, tok = load_policy(ModelConfig(), [task])
    return task, model, tok


def _episodes(task, tok, seeds, g=2, max_context_tokens=512):
    from sixblanks.harness.rollout.agent import run_episodes
    from sixblanks.harness.rollout.engine import SamplingParams

    engine = _Bisect(task, tok)
    inner = engine.generate

    def bisect(prompts, params, n=1, generator=None):  # the bisection guess, every call
        out = []
        for p in prompts:
            engine.calls = 0
            out += inner([p], params, n, generator)
        return out

    engine.generate = bisect
    params = SamplingParams(1.0, max_new_tokens=3)
    return run_episodes(
        engine, tok, task, task.instances(seeds), g, params, max_context_tokens=max_context_tokens
    )


def test_transitions_by_hand(guess4):
    from sixblanks.harness.training.world_model import transitions

    task, _, tok = guess4
    b = _episodes(task, tok, [0], g=1)  # secret 7: the bisection guesses 4, 6, 7
    assert b.actions[0] == ["4\n", "6\n", "7\n"]
    trs = transitions(b)
    assert len(trs) == 3
    text = [tok.decode(t.context, skip_special_tokens=True) for t in trs]
    assert text == [
        "guess 1-8\n4\n",
        "guess 1-8\n4\nhigher\n6\n",
        "guess 1-8\n4\nhigher\n6\nhigher\n7\n",
    ]
    assert [tok.decode(t.obs) for t in trs] == ["higher\n", "higher\n", ""]
    assert [(t.reward, t.done) for t in trs] == [(0.0, False), (0.0, False), (1.0, True)]
    # cut by the context limit after its second action (11 + 2 + 7 + 2 tokens, then "higher\n"
    # and 3 new tokens would pass 30): the environment never ended it, so its last action's end
    # and next observation are unknown and it gives no transition
    cut = _episodes(task, tok, [0], g=1, max_context_tokens=30)
    assert len(cut.actions[0]) == 2 and bool(cut.truncated[0]) and not bool(cut.terminated[0])
    trs = transitions(cut)
    assert len(trs) == 1 and tok.decode(trs[0].obs) == "higher\n" and not trs[0].done


def test_the_world_model_learns_the_environment_and_imagines_without_the_verifier(guess4):
    import random

    from sixblanks.harness.rollout.agent import run_episodes
    from sixblanks.harness.rollout.engine import HFEngine, SamplingParams
    from sixblanks.harness.tasks.verify import VerifierGate
    from sixblanks.harness.training.world_model import ImaginedTask, WorldModel, transitions

    task, model, tok = guess4
    train = transitions(_episodes(task, tok, list(range(40))))
    held = transitions(_episodes(task, tok, list(range(100, 110))))
    wm = WorldModel(model, tok, lr=3e-3, max_obs_tokens=8, device="cpu")
    before = wm.measure(held)
    wm.fit(train, steps=60, batch_size=16, rng=random.Random(0))
    after = wm.measure(held)
    assert before["world_model.heldout_transitions"] == len(held)
    assert after["world_model.heldout_obs_nll"] < before["world_model.heldout_obs_nll"] / 2
    assert after["world_model.heldout_reward_mae"] < before["world_model.heldout_reward_mae"]
    assert 0.0 <= after["world_model.heldout_obs_exact"] <= 1.0  # greedy exact match, measured
    # imagined episodes: the policy acts in the model, the verifier is never called
    imagined = ImaginedTask(task, wm, tok)
    gate = VerifierGate(imagined, timeout_s=None)
    b = run_episodes(
        HFEngine(model, tok),
        tok,
        imagined,
        task.instances([5, 6]),
        3,
        SamplingParams(1.0, max_new_tokens=3),
        gate,
    )
    assert gate.stats.calls == 0 and not bool(b.failed.any())
    assert bool((b.n_turns >= 1).all()) and int(b.n_turns.max()) <= 4
    assert bool(torch.isfinite(b.reward).all())


def _train(guess4, overrides, budget=300.0, run=True):
    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.training import RunSettings, Trainer

    task, model, tok = guess4
    cfg = validate_mapping(
        {
            "task": {"name": "guess_number"},
            "arms": {"a": {"preset": "grpo"}},
            "rollout": {"max_new_tokens": 3, "prompts_per_step": 2, "group_size": 4},
        }
    )
    s = RunSettings(
        resolve("grpo", overrides),
        cfg.rollout,
        cfg.optimizer,
        {"launched_tokens": budget},
        0,
        eval_size=4,
    )
    tr = Trainer(s, task, copy.deepcopy(model), tok)
    return tr, tr.train() if run else None


WM = {"data": {"world_model": {"warmup_steps": 1}}}


def test_imagined_and_real_env_steps_are_counted_apart(guess4):
    from tests.conftest import record_batches

    tr, _ = _train(guess4, WM, run=False)
    batches = record_batches(tr)
    res = tr.train()
    c = res.ledger.counters
    assert res.ended_because == "budget" and not res.ledger.check_invariants()
    real_rows = tr.collector.n_prompts * tr.ctx.group_size  # the real round first, then imagined
    real = sum(float(b.n_turns[:real_rows].sum()) for b in batches if b is not None)
    imagined = sum(float(b.n_turns[real_rows:].sum()) for b in batches if b is not None)
    assert c["env_steps"] == real and c["imagined_env_steps"] == imagined > 0
    assert c["verifier_calls"] == real  # one per real step; imagined steps make none
    # the fit and the imagined rounds are kinds a step's time admission reserves
    kinds = tr.ctx.meter.time_by_kind
    assert {"world_model", "imagined"} <= set(kinds) and set(kinds) - {"step"} <= set(UNIT_KINDS)
    assert c["launched_tokens"] == sum(b.launched_tokens() for b in batches if b is not None)
    steps = res.steps
    assert all("world_model.heldout_obs_nll" in m for m in steps)  # validated every step
    assert steps[0]["world_model.imagined_episodes"] == 0  # warm-up: real rounds only
    imagined_steps = [m["world_model.imagined_episodes"] for m in steps[1:]]
    assert imagined_steps[0] == real_rows  # after the warm-up, one imagined round of P x G
    # a step whose imagined round no longer fits the budget runs its real round alone (the last)
    assert set(imagined_steps) <= {0.0, float(real_rows)}
    assert imagined_steps == sorted(imagined_steps, reverse=True)


def test_world_model_validation():
    with pytest.raises(ValueError, match="data.world_model: imagined rounds join"):
        resolve("rft", {"data": {"world_model": {}}})
    with pytest.raises(ValueError, match="not with ReMax"):
        resolve("remax", {"data": {"world_model": {}}})


def test_a_single_turn_task_is_refused(guess4):
    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.tasks import make_task
    from sixblanks.harness.training import RunSettings, Trainer
    from sixblanks.harness.training.base import TrainingError

    _, model, tok = guess4
    cfg = validate_mapping({"task": {"name": "arithmetic"}, "arms": {"a": {"preset": "grpo"}}})
    s = RunSettings(resolve("grpo", WM), cfg.rollout, cfg.optimizer, {"launched_tokens": 50}, 0)
    with pytest.raises(TrainingError, match="task 'arithmetic' is single-turn"):
        Trainer(s, make_task("arithmetic"), copy.deepcopy(model), tok)


def test_the_report_shows_the_imagined_real_split_and_the_held_out_error(tmp_path):
    import duckdb

    from sixblanks.harness.store.database import append_rows
    from sixblanks.reports.build import build_report
    from tests.test_report_planted import plant

    out = plant(tmp_path)  # arms A and B, 2 tasks x 3 seeds, ledger env_steps 1..10
    con = duckdb.connect(str(out / "results.duckdb"))
    runs = [r[0] for r in con.sql("SELECT run_id FROM runs WHERE arm = 'A' ORDER BY 1").fetchall()]
    # A's runs simulated 30 steps each in a world model (the real ones: 10 at the last step)
    con.execute("UPDATE ledger SET imagined_env_steps = 3.0 * (step + 1) WHERE run_id LIKE 'A-%'")
    con.close()
    nll = {rid: 0.5 + 0.1 * i for i, rid in enumerate(runs)}  # last step's held-out NLL per run
    rows = [
        {"run_id": rid, "step": step, "name": name, "value": value}
        for rid in runs
        for step, name, value in (
            (8, "world_model.heldout_obs_nll", 9.0),  # an earlier step: not the last
            (9, "world_model.heldout_obs_nll", nll[rid]),
            (9, "world_model.heldout_reward_mae", 0.25),
        )
    ]
    append_rows(out, {"metrics": rows})
    md = build_report(out, baseline="B", resamples=100, with_plots=False).parent / "report.md"
    text = md.read_text()
    assert "World model: imagined and real environment steps" in text
    want = sum(nll.values()) / len(nll)
    assert f"| A | 10 | 30 | 75% | {want:.3f} | 0.250 |" in text
    assert not any(ln.startswith("| B | 10 |") for ln in text.splitlines())
