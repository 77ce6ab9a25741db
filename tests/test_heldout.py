"""The held-out splits are held out by PROBLEM, not only by seed: no training or demonstration draw
makes a test or validation problem, a held-out set holds each problem once, and a space too small
for the requested evaluation size is cautioned before anything runs."""

from __future__ import annotations

import json
import random

import pytest

from sixblanks.harness.seeds import demo_seeds, train_seeds
from sixblanks.harness.tasks import make_task
from sixblanks.harness.tasks.registry import BUILTIN

# enough to draw every training problem of the small listed spaces below (at most 435 problems: a
# problem is missed by 20,000 draws with probability about e^-46) and, were the filter broken, to
# draw held-out problems of the large ones by the hundred
DRAWS = 20_000

# every built-in task at its defaults and in at least one small space of its own; the dataset
# task, which reads a file, is covered below
SPACES = [
    ("arithmetic", {}),
    ("arithmetic", {"digits": 1, "operators": "+", "operands": 2}),
    ("arithmetic", {"digits": 2}),
    ("running_sum", {}),
    ("running_sum", {"min_operands": 2, "max_operands": 2, "operators": "+"}),
    ("guess_number", {}),
    ("guess_number", {"low": 1, "high": 4}),
    ("guess_number", {"low": 1, "high": 2}),
    ("chain_arithmetic", {}),
    ("chain_arithmetic", {"steps": 1, "operators": "+"}),
    ("long_arithmetic", {}),
    ("long_arithmetic", {"min_digits": 1, "max_digits": 1, "operators": "*"}),
    ("long_arithmetic", {"min_digits": 2, "max_digits": 3, "operands": 3, "operators": "*+-"}),
    ("plan_execute", {}),
    ("plan_execute", {"high": 5, "subgoals": 1}),
    ("nim", {}),
    ("nim", {"low": 3, "high": 5}),
]


def test_every_builtin_task_but_the_dataset_is_covered():
    assert {name for name, _ in SPACES} == set(BUILTIN) - {"dataset"}


def _keys(task, instances):
    return [task.problem_key(i) for i in instances]


@pytest.mark.parametrize(("name", "params"), SPACES, ids=lambda v: json.dumps(v))
def test_training_never_draws_a_held_out_problem(name, params):
    task = make_task(name, params)
    held = {s: set(_keys(task, task.eval_instances(4096, s))) for s in ("test", "validation")}
    assert held["test"] and held["validation"]
    seeds = train_seeds(random.Random(7), DRAWS, task)  # what RunContext.train_instances draws
    drawn = {task.seed_key(s) for s in seeds}
    if task.space_size() > 2:  # a space of two problems has its validation share test's one
        assert not held["test"] & held["validation"]
    assert not drawn & (held["test"] | held["validation"])
    demos = demo_seeds(random.Random(3), 2, 2_000, task)
    assert not set(_keys(task, task.instances(demos))) & (held["test"] | held["validation"])
    # the keys of the same instances, built as training builds them, agree with the draw's
    assert {task.problem_key(i) for i in task.instances(seeds[:500])} <= drawn
    if task.space_size() <= 1_000:  # a small listed space: most of it is training's, all seen
        assert len(drawn) >= task.space_size() - 2 * max(1, round(task.space_size() / 8))
        assert len(drawn) + len(held["test"] | held["validation"]) == task.space_size()


@pytest.mark.parametrize(("name", "params"), SPACES, ids=lambda v: json.dumps(v))
def test_a_held_out_set_holds_distinct_problems_in_a_fixed_order(name, params):
    task = make_task(name, params)
    for split in ("test", "validation"):
        got = task.eval_instances(64, split)
        keys = _keys(task, got)
        assert len(set(keys)) == len(keys) == task.distinct_available(split, 64)
        assert 1 <= len(got) <= 64
        again = make_task(name, params).eval_instances(64, split)  # a fresh task object
        assert [i.seed for i in again] == [i.seed for i in got]
        assert [i.prompt for i in again] == [i.prompt for i in got]
        # a smaller set is the start of a larger one
        assert [i.seed for i in task.eval_instances(5, split)] == [i.seed for i in got[:5]]


def test_the_split_sizes_of_small_spaces():
    guess = make_task("guess_number", {})  # 16 secrets: 2 test, 2 validation, 12 train
    assert guess.distinct_available("test", 64) == guess.distinct_available("validation", 64) == 2
    assert len(guess.eval_instances(64)) == 2
    arith = make_task("arithmetic", {})  # 100 x 2 expressions: an eighth each
    assert arith.distinct_available("test", 64) == 25
    assert arith.distinct_available("test", 10) == 10
    assert make_task("arithmetic", {"digits": 2}).distinct_available("test", 64) == 64
    one = make_task("nim", {"low": 4, "high": 4})  # nothing to hold out: one problem for all
    assert [i.data["pile"] for i in one.eval_instances(8)] == [4]
    assert train_seeds(random.Random(0), 3, one)  # and training still draws it


def test_training_draws_replay_exactly():
    task = make_task("arithmetic", {})
    a = train_seeds(random.Random(11), 500, task)
    b = train_seeds(random.Random(11), 500, make_task("arithmetic", {}))
    assert a == b
    rng = random.Random(11)
    train_seeds(rng, 250, task)
    assert train_seeds(rng, 250, task) == a[250:]  # a draw continues where the last one ended


def test_a_task_without_a_problem_identity_keeps_its_seed_ranges():
    from sixblanks.harness.seeds import eval_seeds
    from sixblanks.harness.tasks import Instance, Task

    class Plain(Task):
        name = "plain"

        def make_instance(self, seed):
            return Instance(seed, "p", {})

    t = Plain()
    assert [i.seed for i in t.eval_instances(8)] == eval_seeds(8)
    assert t.distinct_available("test", 8) == 8
    assert train_seeds(random.Random(1), 4, t) == train_seeds(random.Random(1), 4, None)


def _rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_a_dataset_prompt_sits_in_one_split_only(tmp_path):
    # 40 distinct prompts, each twice: a drawn split keeps a prompt's rows together
    rows = [{"prompt": f"q{i % 40}", "answer": str(i % 40)} for i in range(80)]
    t = make_task("dataset", {"path": _rows(tmp_path / "d.jsonl", rows)})
    test, val = t.eval_instances(100), t.eval_instances(100, "validation")
    held = set(_keys(t, test)) | set(_keys(t, val))
    assert len(set(_keys(t, test))) == len(test) == t.distinct_available("test", 100) == 8
    assert len(val) == 4 and not set(_keys(t, test)) & set(_keys(t, val))
    seeds = train_seeds(random.Random(0), 2_000, t)
    assert not {t.problem_key(i) for i in t.instances(seeds)} & held
    # named splits that share a prompt: the held-out one keeps it, training drops its row
    named = [
        {"prompt": "a", "answer": "1", "split": "train"},
        {"prompt": "b", "answer": "2", "split": "train"},
        {"prompt": "a", "answer": "1", "split": "test"},
        {"prompt": "c", "answer": "3", "split": "test"},
        {"prompt": "c", "answer": "3", "split": "test"},
        {"prompt": "d", "answer": "4", "split": "validation"},
    ]
    t = make_task("dataset", {"path": _rows(tmp_path / "n.jsonl", named), "split_field": "split"})
    assert [r["prompt"] for r in t.splits["train"]] == ["b"]
    assert [i.prompt for i in t.eval_instances(10)] == ["a\n", "c\n"]
    assert t.heldout_notes() == [
        "1 row(s) of its train split dropped: their prompt is also a held-out one"
    ]


def test_validate_cautions_a_space_smaller_than_the_evaluation(cli, write_yaml):
    cfg = {
        "name": "c",
        "tasks": [
            {"name": "guess_number", "eval_size": 64},
            {"name": "arithmetic", "params": {"digits": 2}, "eval_size": 64},
        ],
        "arms": {"grpo": {"preset": "grpo"}},
    }
    code, out, _ = cli("validate", write_yaml(json.dumps(cfg)), "--json")
    assert code == 0
    notes = [n for n in json.loads(out)["cautions"] if "held-out" in n]
    assert len(notes) == 1  # 2-digit arithmetic holds far more than 64 test problems
    assert notes[0].startswith("task 'guess_number': the evaluation asks for 64 held-out")
    assert "holds 2 distinct test problem(s)" in notes[0]


def test_nims_external_games_start_from_held_out_piles_only():
    task = make_task("nim", {})
    games = task.heldout_games(16, "test")
    test_piles = {i.data["pile"] for i in task.eval_instances(64, "test")}
    assert len(games) == 16 and {i.data["pile"] for i in games} == test_piles
    assert len({i.seed for i in games}) == 16  # each another game against a seeded opponent
