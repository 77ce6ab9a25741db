"""Claims that hold by construction are checked as tests, not run as findings: a finding whose
result follows from its own mechanism would report a verdict that measures nothing.

DAPO's dynamic sampling drops the groups whose rewards are all equal and samples more, so the share
of trained groups that carry a learning signal (``trainable_group_frac_kept``) rises by
construction. What can still be wrong is the measurement: this checks the metric against the
census the sampler keeps, step by step, with dynamic sampling on and off."""

from __future__ import annotations

import math

from .conftest import query

# the tiny policy of the findings tests, warm-started for 40 steps rather than 20 (after 20 it
# solves nothing, every group is all-wrong and dynamic sampling keeps none): right on some problems
# and wrong on others, so groups of 4 come out both varied and all-equal
TINY = {
    "name": "census-claim",
    "model": {
        "tiny": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64}
    },
    "task": {"name": "arithmetic", "params": {"digits": 1, "operators": "+", "operands": 2}},
    "rollout": {"max_new_tokens": 3, "group_size": 4, "prompts_per_step": 4},
    "warm_start": {"steps": 40, "num_demos": 300},
    "budget": {"launched_tokens": 480},
    "eval": {"size": 16, "every": 480},
    "arms": {
        "plain": {"preset": "grpo"},
        "dynamic": {"preset": "grpo", "blanks": {"data": {"dynamic_sampling": True}}},
    },
}


def test_dynamic_sampling_raises_the_trained_share_the_census_counts(run_experiment):
    """Each step's ``trainable_group_frac_kept`` equals the share computed from that step's census
    row alone: the kept groups less the all-equal groups that were kept (the all-equal groups
    launched, groups_launched - groups_varied, less those the verdicts dropped), over the kept
    groups. Plain GRPO keeps every launched group, so its share is groups_varied / groups_launched
    and falls below 1 wherever a group came out all-equal; dynamic sampling keeps none of those, so
    its share is 1; and the dynamic arm's mean over steps is the larger."""

    out = run_experiment(TINY)
    rows = query(
        out,
        "SELECT r.arm, c.step, c.groups_launched, c.groups_varied, c.groups_kept,"
        " c.dropped_all_correct + c.dropped_all_wrong + c.dropped_zero_variance,"
        " c.dropped_surplus, c.dropped_accuracy"
        " FROM census c JOIN runs r USING (run_id) ORDER BY r.arm, c.step",
    )
    metric = {
        (arm, step): value
        for arm, step, value in query(
            out,
            "SELECT r.arm, m.step, m.value FROM metrics m JOIN runs r USING (run_id)"
            " WHERE m.name = 'trainable_group_frac_kept'",
        )
    }
    assert {arm for arm, *_ in rows} == {"plain", "dynamic"}
    expected: dict[str, list[float]] = {"plain": [], "dynamic": []}
    for arm, step, launched, varied, kept, dropped_equal, surplus, accuracy in rows:
        # every launched group is kept or dropped with a reason
        assert launched == kept + dropped_equal + surplus + accuracy, (arm, step)
        if arm == "plain":
            assert (kept, dropped_equal, surplus) == (launched, 0, 0), step
        kept_equal = (launched - varied) - dropped_equal
        if kept == 0:
            assert (arm, step) not in metric  # nothing trained: no share to report
            continue
        want = (kept - kept_equal) / kept
        got = metric.get((arm, step))
        assert got is not None and math.isclose(got, want, abs_tol=1e-9), (arm, step, got, want)
        expected[arm].append(want)
    assert expected["plain"] and expected["dynamic"]
    # not vacuous: plain GRPO trained on some all-equal group, which dynamic sampling never does
    assert min(expected["plain"]) < 1.0
    assert expected["dynamic"] == [1.0] * len(expected["dynamic"])
    mean = {arm: sum(v) / len(v) for arm, v in expected.items()}
    assert mean["dynamic"] > mean["plain"]
