"""Search as a collector (issue 19, items 1-2 in part): best-of-N with selection, distilled by SFT
(expert iteration, or distillation of the frozen initial policy), and its accounting: every
sample charged to the totals and to the search counters, the unselected ones discarded as
search_selection."""

import copy

import pytest
import torch

from sixblanks.algorithms.presets import resolve


def _batch(rewards, failed=()):
    from types import SimpleNamespace

    r = torch.tensor(rewards, dtype=torch.float32)
    f = torch.zeros(len(rewards), dtype=torch.bool)
    for i in failed:
        f[i] = True
    return SimpleNamespace(reward=r, failed=f, size=len(rewards))


def test_selection_by_hand():
    from sixblanks.harness.training.collectors.search import select

    # two prompts of four samples: [0, 1, 1, 0.5] and [0, 0, 0.5, 0.2]
    b = _batch([0, 1, 1, 0.5, 0, 0, 0.5, 0.2])
    assert select(b, 4, "best", 1.0) == [1]  # the first of the tied best; prompt 2 has none
    assert select(b, 4, "all_passing", 1.0) == [1, 2]
    assert select(b, 4, "best", 0.5) == [1, 6]
    assert select(b, 4, "all_passing", 0.5) == [1, 2, 3, 6]
    failed = _batch([0, 1, 1, 0.5], failed=[1])
    assert select(failed, 4, "best", 1.0) == [2]  # a failed sample is never selected


@pytest.fixture(scope="module")
def arithmetic_policy():
    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.models import load_pretrained
    from sixblanks.harness.tasks import make_task
    from tests.golden.record import CONFIG, INITIAL_DIR

    cfg = validate_mapping(CONFIG)
    model, tok = load_pretrained(INITIAL_DIR, "cpu", "float32")
    return cfg, make_task("arithmetic"), model, tok


def _run(arithmetic_policy, overrides, budget=700.0):
    from sixblanks.harness.training import RunSettings, Trainer

    cfg, task, model, tok = arithmetic_policy
    s = RunSettings(
        resolve("rft", overrides), cfg.rollout, cfg.optimizer, {"launched_tokens": budget}, 0
    )
    from tests.conftest import record_batches

    tr = Trainer(s, task, copy.deepcopy(model), tok)
    batches = record_batches(tr)
    return tr, tr.train(), batches


def test_expert_iteration_charges_every_sample_to_the_totals_and_the_search_counters(
    arithmetic_policy,
):
    tr, res, batches = _run(arithmetic_policy, {})
    c = res.ledger.counters
    assert res.ended_because == "budget" and not res.ledger.check_invariants()
    # the only data source is the search: its counters equal the totals
    assert c["search_tokens"] == c["launched_tokens"] > 0
    assert c["search_env_steps"] == c["env_steps"] > 0
    assert c["search_verifier_calls"] == c["verifier_calls"] > 0
    # what was not selected is discarded, by reason, and what was selected was trained
    selection = res.ledger.discarded_by_reason["search_selection"]
    assert selection > 0
    trained = [b for b in batches if b is not None]
    assert c["accepted_tokens"] == sum(float(b.action_mask.sum()) for b in trained)
    assert c["launched_tokens"] == c["accepted_tokens"] + c["discarded_tokens"]
    assert all(bool((b.reward >= 1.0).all()) for b in trained)  # rejection sampling
    # the census accounts for every prompt's group, as dynamic sampling's does
    for cen in res.census:
        kept = cen["groups_kept"] + sum(cen["groups_dropped"].values())
        assert cen["groups_launched"] == kept == 4
    assert sum(cen["tokens_launched"] for cen in res.census) == c["launched_tokens"]
    assert sum(cen["tokens_accepted"] for cen in res.census) == c["accepted_tokens"]
    steps = [m for m in res.steps if "search.samples" in m]
    assert sum(m["search.selected"] for m in steps) == sum(b.size for b in trained)
    # one iteration per step, its improvement the change of the share of prompts solved
    for k, m in enumerate(steps):
        assert m["expert_iteration.iteration"] == k + 1
        if k:
            want = m["search.success_rate"] - steps[k - 1]["search.success_rate"]
            assert m["expert_iteration.improvement"] == pytest.approx(want)
    # the selection cost: launched tokens per selected (trained) token, step by step
    prev = {"launched": 0.0, "accepted": 0.0}
    for m in res.steps:
        launched = m["ledger.launched_tokens"] - prev["launched"]
        accepted = m["ledger.accepted_tokens"] - prev["accepted"]
        if m.get("search.selected"):
            assert m["search.selection_cost"] == pytest.approx(launched / accepted)
        prev = {"launched": m["ledger.launched_tokens"], "accepted": m["ledger.accepted_tokens"]}


def test_distillation_searches_with_the_frozen_initial_policy(arithmetic_policy):
    tr, res, batches = _run(arithmetic_policy, {"data": {"search": {"policy": "initial"}}})
    assert tr.collector.engine.model is tr.ctx.ref_model  # not the policy being trained
    trained = [b for b in batches if b is not None]
    assert trained and all(int(b.policy_version.max()) == 0 for b in trained)
    initial = arithmetic_policy[2].state_dict()  # the search policy never moved from it
    assert all(torch.equal(v, initial[k]) for k, v in tr.ctx.ref_model.state_dict().items())
    assert res.ledger.counters["optimizer_steps"] > 0  # the policy itself did train


def test_a_step_whose_search_finds_nothing_trains_on_nothing_and_counts_it(arithmetic_policy):
    _, res, batches = _run(arithmetic_policy, {"data": {"search": {"min_reward": 2.0}}}, 300.0)
    c = res.ledger.counters
    assert all(b is None for b in batches)  # arithmetic pays at most 1: nothing passes
    assert c["accepted_tokens"] == 0 and c["optimizer_steps"] == 0
    assert res.ledger.discarded_by_reason["search_selection"] == c["launched_tokens"] > 0
    assert not res.ledger.check_invariants()


def test_search_is_sft_only_and_explained(cli):
    with pytest.raises(ValueError, match="trains on 'rollouts', not 'search'"):
        resolve("grpo", {"data": {"source": "search"}})
    code, out, _ = cli("explain", "rft")
    assert code == 0 and "search.n" in out and "search_selection" in out
