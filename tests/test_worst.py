"""One worst case per step: what `sixblanks validate` compares a budget with
(harness/config/budget_checks.py: step_worst) and what the training loop reserves before a step
(RunContext.worst_rollouts, Trainer.worst_update) come from the same functions
(budgets/worst.py), checked by hand; and a real run never charges a step more than validate said."""

from __future__ import annotations

import pytest

from sixblanks.budgets.worst import episodes_worst, update_worst
from sixblanks.harness.config import validate_mapping
from sixblanks.harness.config.checks import resolved_arms, step_worst

from .conftest import query


def test_the_worst_case_by_hand():
    # 8 prompts x 4 samples, 2 turns of at most 6 new tokens on contexts of at most 64
    tools = {"tool_calls_per_episode": 2, "tool_seconds_per_call": 15.0}
    w = episodes_worst(32, 2, 6, 64, judge_calls_per_verify=3, **tools)
    assert w == {
        "launched_tokens": 384.0,
        "prompt_tokens": 4096.0,
        "rollouts_launched": 32.0,
        "env_steps": 64.0,
        "verifier_calls": 64.0,
        "judge_calls": 192.0,
        "tool_calls": 64.0,
        "tool_seconds": 960.0,
    }
    assert "tool_calls" not in episodes_worst(32, 2, 6, 64, 0)
    assert update_worst(2, 4, 32, 384.0) == {
        "optimizer_steps": 8.0,
        "accepted_tokens": 384.0,
        "rollouts_accepted": 32.0,
    }


CFG = {
    "task": {"name": "arithmetic", "eval_size": 4},
    "rollout": {"max_new_tokens": 6, "group_size": 4, "prompts_per_step": 4},
    "warm_start": {"steps": 20, "num_demos": 100},
    "budget": {"launched_tokens": 500},
    "eval": {"every": None},
    "arms": {
        "grpo": {"preset": "grpo", "blanks": {"data": {"minibatches": 2}}},
        "remax": {"preset": "remax"},  # a greedy rollout per prompt on top of the group
    },
}


@pytest.mark.parametrize("arm", ["grpo", "remax"])
def test_validate_says_what_a_step_reserves_and_no_step_charges_more(run_experiment, arm):
    cfg = validate_mapping(CFG)
    (spec,) = [a for a in resolved_arms(cfg) if a.name == arm]
    said = {k: v for k, (v, _) in step_worst(spec, 1, 0).items()}
    # grpo: 4 prompts x 4 samples; remax (its preset: one sample) adds a greedy rollout a prompt
    per_prompt = {"grpo": 4, "remax": 1 + 1}[arm]
    assert said["rollouts_launched"] == 4 * per_prompt
    assert said["launched_tokens"] == 4 * per_prompt * 6
    assert said["optimizer_steps"] == (2 if arm == "grpo" else 1)
    out = run_experiment({**CFG, "arms": {arm: CFG["arms"][arm]}})
    cols = sorted(said)
    rows = query(
        out, f"select step, {', '.join(cols)} from ledger order by step"
    )  # cumulative counters after each step
    assert len(rows) >= 3
    before = dict.fromkeys(cols, 0.0)
    for step, *values in rows:
        now = dict(zip(cols, values))
        for k in cols:
            assert now[k] - before[k] <= said[k] + 1e-9, (step, k, now[k] - before[k], said[k])
        before = now
    # the launched tokens a step could reach: a step of full-length answers would hit it exactly
    assert (
        max(r[1 + cols.index("rollouts_launched")] for r in rows[:1]) == said["rollouts_launched"]
    )
