"""The pass-rate curriculum of the data blank (``data.curriculum``): a prompt whose latest groups
all passed or all failed is skipped before launch with probability 1 - max(p^z, floor); skipped
prompts cost nothing and are counted by the census by reason; the draws are deterministic under the
run's seed; a default data blank dumps as before the field existed."""

import random

import pytest
import torch

from sixblanks.algorithms.blanks import Blanks, flatten
from sixblanks.algorithms.data import (
    PassRateCurriculum,
    SamplingCensus,
    launch_probability,
    pass_rate_streak,
)
from sixblanks.algorithms.data_specs import CurriculumSpec, DataSpec
from sixblanks.algorithms.fields import applicable_fields
from sixblanks.harness.training.collectors.pool import PromptPool
from tests.short_runs import golden_initial, short_run


def scripted(values):
    """A uniform source that returns ``values`` in order and records how many were drawn."""

    it = iter(values)

    def draw():
        draw.calls += 1
        return next(it)

    draw.calls = 0
    return draw


def test_streaks_and_launch_probabilities_by_hand():
    assert pass_rate_streak([]) == (None, 0)
    assert pass_rate_streak([0.0, 1.0, 1.0]) == ("all_correct", 2)
    assert pass_rate_streak([1.0, 0.0, 0.0, 0.0]) == ("all_wrong", 3)
    assert pass_rate_streak([1.0, 0.5]) == (None, 0)
    assert pass_rate_streak([0.25, 1.0]) == ("all_correct", 1)
    assert launch_probability(0, 0.5, 0.01) == 1.0
    assert launch_probability(2, 0.5, 0.01) == 0.25  # 0.5^2
    assert launch_probability(3, 0.25, 0.1) == 0.1  # 0.25^3 = 0.015625, below the floor


def test_a_sequence_of_pass_rates_gives_the_skips_computed_by_hand():
    """A: two solved groups (launched with probability 0.5^2 = 0.25); B: three unsolved (0.25^3 =
    0.0156, so the floor 0.1); C: its latest group mixed (always launched, no draw). Uniform draws
    0.2, 0.3, 0.05, 0.9: A 0.2 < 0.25 launched; B 0.3 >= 0.1 skipped; C launched without a draw;
    B 0.05 < 0.1 launched; A 0.9 >= 0.25 skipped."""

    u = scripted([0.2, 0.3, 0.05, 0.9])
    c = PassRateCurriculum(explore_solved=0.5, explore_unsolved=0.25, floor=0.1, uniform=u)
    for key, rates in {"A": [1.0, 1.0], "B": [0.0, 0.0, 0.0], "C": [1.0, 0.5]}.items():
        for r in rates:
            c.record(key, r)
    assert c.streaks == {"A": ("all_correct", 2), "B": ("all_wrong", 3), "C": (None, 0)}
    got = [c.skip(k) for k in ("A", "B", "C", "B", "A")]
    assert got == [None, "all_wrong", None, None, "all_correct"]
    assert u.calls == 4  # C drew nothing
    c.record("A", 0.5)  # a mixed group ends A's streak: launched, no draw
    c.record("B", 0.0)
    assert c.streaks["B"] == ("all_wrong", 4)
    c.record("B", 1.0)  # one solved group after the unsolved ones: a streak of 1 of the other kind
    assert c.streaks["B"] == ("all_correct", 1)
    assert c.skip("A") is None and u.calls == 4


def _pool(n, explore=0.5, seed=0):
    spec = CurriculumSpec(explore_solved=explore, explore_unsolved=explore, floor=0.01)
    return PromptPool(n, seed=seed, rng=random.Random(seed), retire_at=None, curriculum=spec)


def test_the_pool_skips_along_its_pass_and_counts_by_reason():
    """Groups of two samples: A both pass (solved), B both fail (unsolved), C one of two (mixed),
    D both pass. The next pass visits A, B, C, D in this order; p = 0.5, so a streak of 1 is
    launched when u < 0.5. Draws 0.7 (A skipped, all_correct), 0.2 (B launched), none for C:
    the first draw of two gives [B, C]; the second reaches D: 0.6, skipped (all_correct)."""

    pool = _pool(4)
    first = pool.draw(4)  # no history yet: all four launched, no draw needed
    assert sorted(first) == sorted(pool.seeds) and pool.skipped == {
        "all_correct": 0,
        "all_wrong": 0,
    }
    a, b, c, d = first
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0])
    pool.record(first, rewards, torch.arange(4).repeat_interleave(2))
    assert pool.curriculum.streaks == {
        a: ("all_correct", 1),
        b: ("all_wrong", 1),
        c: (None, 0),
        d: ("all_correct", 1),
    }
    pool.order = [a, b, c, d]  # a known pass
    pool.curriculum.uniform = scripted([0.7, 0.2, 0.6, 0.0, 0.0, 0.0, 0.0])
    assert pool.draw(2) == [b, c]
    assert pool.skipped == {"all_correct": 1, "all_wrong": 0}
    assert pool.order == [d]
    pool.draw(1)
    assert pool.skipped["all_correct"] == 2  # D skipped at 0.6 before the fresh pass began


def test_a_draw_always_ends_however_long_the_streaks():
    """Three prompts, all solved, p = 0 (launch probability the floor 0.01), every draw 0.5: each
    drawn prompt is skipped until as many in a row were skipped as candidates are left (3, then 2),
    and the next one is launched whatever its streak. Two prompts out, 3 + 2 skipped, 5 draws, and
    three fresh passes begun (at the draw's start, after the 3 skips, after the next 2)."""

    pool = _pool(3, explore=0.0)
    first = pool.draw(3)
    pool.record(first, torch.ones(3), torch.arange(3))
    u = scripted([0.5] * 10)
    pool.curriculum.uniform = u
    epochs = pool.epochs
    out = pool.draw(2)
    assert len(set(out)) == 2 and set(out) <= set(first)
    assert pool.skipped == {"all_correct": 5, "all_wrong": 0} and u.calls == 5
    assert pool.epochs == epochs + 3


def test_the_same_seed_draws_and_skips_the_same_prompts():
    def run(seed):
        pool = _pool(6, seed=seed)
        drawn = []
        for _ in range(8):
            seeds = pool.draw(3)
            drawn.append(seeds)
            # a deterministic outcome per prompt: seeds with an even value always pass
            rewards = torch.tensor([[float(s % 2 == 0)] * 2 for s in seeds]).flatten()
            pool.record(seeds, rewards, torch.arange(3).repeat_interleave(2))
        return drawn, dict(pool.skipped), pool.state_dict()

    one, two, other = run(0), run(0), run(1)
    assert one == two
    assert sum(one[1].values()) > 0  # the curriculum acted
    assert one[0] != other[0]
    # a pool restored from a checkpoint goes on as the one that never stopped
    pool = _pool(6)
    pool.load_state_dict(one[2])
    again = _pool(6)
    again.load_state_dict(one[2])
    assert [pool.draw(3) for _ in range(4)] == [again.draw(3) for _ in range(4)]


def test_the_blank_dumps_as_before_when_off_and_needs_a_pool():
    assert "curriculum" not in DataSpec().model_dump()
    assert "curriculum" not in Blanks().model_dump(mode="json")["data"]
    on = DataSpec(prompt_pool=8, curriculum={"kind": "pass_rate"})
    assert on.model_dump(mode="json")["curriculum"] == {
        "kind": "pass_rate",
        "explore_solved": 0.5,
        "explore_unsolved": 0.5,
        "floor": 0.01,
    }
    assert DataSpec.model_validate(on.model_dump()) == on
    with pytest.raises(ValueError, match="data.curriculum: .*data.prompt_pool"):
        Blanks(data={"curriculum": {"kind": "pass_rate"}})
    with pytest.raises(ValueError):
        CurriculumSpec(floor=0.0)
    # explain and the diffs still see the field: None where unset, its values where set
    assert flatten(Blanks())["data.curriculum"] is None
    pooled = Blanks(data={"prompt_pool": 8, "curriculum": {"explore_solved": 0.3}})
    assert flatten(pooled)["data.curriculum.explore_solved"] == 0.3
    assert "data.curriculum.explore_solved" in applicable_fields(pooled)
    assert "data.curriculum" not in applicable_fields(Blanks())  # no pool: nothing to skip
    assert "prompts_skipped" not in SamplingCensus().as_dict()
    assert SamplingCensus(prompts_skipped={"all_correct": 1, "all_wrong": 0}).as_dict()[
        "prompts_skipped"
    ] == {"all_correct": 1, "all_wrong": 0}


@pytest.fixture(scope="module")
def initial():
    return golden_initial()


def test_a_run_counts_the_skipped_prompts_and_launches_only_the_others(initial):
    """A GRPO run on a pool of 4 prompts: every step's census counts the prompts it skipped by
    reason (the pool's totals), skipped prompts are never launched (rollouts launched = G x groups
    launched), the ledger balances, and a second run of the same seed skips the same prompts."""

    data = {"prompt_pool": 4, "curriculum": {"explore_solved": 0.2, "explore_unsolved": 0.2}}
    trainer, res = short_run(initial, "grpo", budget=900, data=data)
    pool = trainer.collector.prompt_pool
    skipped = {
        r: sum(c["prompts_skipped"][r] for c in res.census) for r in ("all_correct", "all_wrong")
    }
    assert skipped == pool.skipped and sum(skipped.values()) > 0
    steps = [m for m in res.steps if "curriculum.skipped_all_correct" in m]
    assert sum(m["curriculum.skipped_all_correct"] for m in steps) == skipped["all_correct"]
    led, g = res.ledger, trainer.ctx.group_size
    assert led.counters["rollouts_launched"] == g * sum(c["groups_launched"] for c in res.census)
    assert led.counters["launched_tokens"] == pytest.approx(
        led.counters["accepted_tokens"] + sum(led.discarded_by_reason.values())
    )
    _, again = short_run(initial, "grpo", budget=900, data=data)
    assert [c["prompts_skipped"] for c in again.census] == [
        c["prompts_skipped"] for c in res.census
    ]


def test_the_store_keeps_the_skipped_prompts_by_reason():
    """A census record's skipped prompts become the census table's skipped_* columns; a record of
    a run without a curriculum gives 0."""

    from sixblanks.harness.store.database import schema_columns
    from sixblanks.harness.store.rows import census_rows

    base = {"type": "census", "step": 1, "groups_dropped": {"all_wrong": 2}}
    rows = census_rows(
        "r", [{**base, "prompts_skipped": {"all_correct": 3, "all_wrong": 1}}, {**base, "step": 2}]
    )
    assert [(r["skipped_all_correct"], r["skipped_all_wrong"]) for r in rows] == [(3, 1), (0, 0)]
    assert rows[0]["dropped_all_wrong"] == 2
    assert set(rows[0]) <= set(schema_columns("census"))
