"""Dataset tasks: prompts and answers from JSONL, CSV, Parquet or a datasets directory,
deterministic splits, the standard verifiers by hand, counted through the verifier gate, and one
end-to-end run with math_verify on the shipped file."""

import json

import polars as pl
import pytest

from sixblanks.harness.tasks import make_task
from sixblanks.harness.tasks.dataset import score

from .conftest import ROOT, query

SHIPPED = str(ROOT / "examples" / "data" / "math.jsonl")
ROWS = [{"q": f"{i}+1=?", "a": str(i + 1)} for i in range(10)]


def half_credit(response, answer, row):
    """A user verifier: 0.5 for any response that contains the answer."""

    return 0.5 if answer in response else 0.0


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    import datasets

    d = tmp_path_factory.mktemp("data")
    pl.DataFrame(ROWS).write_ndjson(d / "x.jsonl")
    pl.DataFrame(ROWS).write_csv(d / "x.csv")
    pl.DataFrame(ROWS).write_parquet(d / "x.parquet")
    datasets.Dataset.from_list(ROWS).save_to_disk(str(d / "flat"))
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list(ROWS[:6]),
            "validation": datasets.Dataset.from_list(ROWS[6:8]),
            "test": datasets.Dataset.from_list(ROWS[8:]),
        }
    ).save_to_disk(str(d / "dict"))
    return d


def _task(path, **kw):
    return make_task("dataset", {"path": str(path), "prompt_field": "q", "answer_field": "a", **kw})


def test_every_format_reads_the_same_rows_and_splits_them_the_same_way(files):
    splits = [_task(files / f).splits for f in ("x.jsonl", "x.csv", "x.parquet", "flat")]
    for s in splits[1:]:
        assert {k: [str(r["a"]) for r in v] for k, v in s.items()} == {
            k: [str(r["a"]) for r in v] for k, v in splits[0].items()
        }
    s = splits[0]
    # 10 rows: 2 test (0.2), 1 validation (0.1), 7 train; a partition of the rows
    assert (len(s["test"]), len(s["validation"]), len(s["train"])) == (2, 1, 7)
    assert sorted(r["a"] for v in s.values() for r in v) == sorted(r["a"] for r in ROWS)
    other = _task(files / "x.jsonl", split_seed=1).splits
    assert [r["a"] for r in other["test"]] != [r["a"] for r in s["test"]]  # the seed draws it
    # a DatasetDict names its splits
    named = _task(files / "dict").splits
    assert [r["a"] for r in named["test"]] == ["9", "10"] and len(named["train"]) == 6


def test_seeds_map_to_their_split_and_a_split_column_is_used(files, tmp_path):
    t = _task(files / "dict")
    test = t.eval_instances(64)  # all of the split where it has fewer rows
    assert [i.data["answer"] for i in test] == ["9", "10"] and test[0].prompt == "8+1=?\n"
    assert [i.data["answer"] for i in t.eval_instances(5, "validation")] == ["7", "8"]
    train = {t.make_instance(s).data["answer"] for s in range(40)}
    assert train == {"1", "2", "3", "4", "5", "6"}  # training seeds: train rows only
    rows = [{**r, "part": "test" if i < 3 else "train"} for i, r in enumerate(ROWS)]
    pl.DataFrame(rows).write_ndjson(tmp_path / "s.jsonl")
    with pytest.raises(ValueError, match="its validation split has no rows"):
        _task(tmp_path / "s.jsonl", split_field="part")
    rows[3]["part"] = "val"
    pl.DataFrame(rows).write_ndjson(tmp_path / "s.jsonl")
    s = _task(tmp_path / "s.jsonl", split_field="part").splits
    assert [r["a"] for r in s["test"]] == ["1", "2", "3"] and [r["a"] for r in s["validation"]] == [
        "4"
    ]


def test_verifiers_by_hand():
    assert score("exact", " 12 \n", "12") == 1.0 and score("exact", "12.0", "12") == 0.0
    assert score("numeric", "so it is 12.0", "12") == 1.0  # the last number in the response
    assert score("numeric", "12 or 13", "12") == 0.0
    assert score("numeric", "3.1416", "3.14159", tolerance=1e-4) == 1.0
    assert score("numeric", "3.15", "3.14159", tolerance=1e-4) == 0.0
    assert score("numeric", "none", "3") == 0.0
    assert score("regex", "Answer: 42.", "42", pattern=r"Answer: (\d+)") == 1.0
    assert score("regex", "42", "42", pattern=r"Answer: (\d+)") == 0.0
    # math_verify: equivalence, not string equality
    assert score("math_verify", "0.5", r"\frac{1}{2}") == 1.0
    assert score("math_verify", "2/4", r"\frac{1}{2}") == 1.0
    assert score("math_verify", "0.4", r"\frac{1}{2}") == 0.0
    assert score("math_verify", "no answer", "3") == 0.0


def test_verifiers_go_through_the_counted_gate(files):
    from sixblanks.harness.tasks.verify import VerifierGate

    t = _task(files / "x.jsonl", verifier="tests.test_dataset:half_credit")
    gate = VerifierGate(t)
    inst = t.eval_instances(2)
    assert [gate(i, f"= {i.data['answer']}") for i in inst] == [0.5, 0.5]
    assert gate(inst[0], "nothing") == 0.0 and gate.stats.calls == 3


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"path": "nope.jsonl"}, "does not exist"),
        ({"path": SHIPPED, "verifier": "fuzzy"}, "unknown verifier 'fuzzy' (valid: exact, numeric"),
        (
            {"path": SHIPPED, "prompt_field": "prompt"},
            "no column 'prompt' (columns: question, answer)",
        ),
        ({"path": SHIPPED, "prompt_field": "question", "verifier": "regex"}, "needs a pattern"),
        ({"path": SHIPPED, "prompt_field": "question", "verifier": "no_mod:fn"}, "cannot import"),
    ],
)
def test_bad_dataset_params_are_named(cli, write_yaml, params, message):
    text = json.dumps(
        {"arms": {"a": {"preset": "grpo"}}, "task": {"name": "dataset", "params": params}}
    )
    code, _, err = cli("validate", write_yaml(text))
    assert code == 2 and message in err, err


def test_a_dataset_task_with_math_verify_end_to_end(run_experiment):
    """`sixblanks run` on the shipped file with math_verify: warm start on its train rows, a tiny
    budget, evaluations on its test split (all 18 of its questions: the file's 120 rows hold 92
    distinct questions, a fifth of them test, each once), every verifier call counted."""

    cfg = {
        "name": "dataset-e2e",
        "task": {
            "name": "dataset",
            "params": {"path": SHIPPED, "prompt_field": "question", "verifier": "math_verify"},
        },
        "rollout": {"max_new_tokens": 8, "prompts_per_step": 2, "group_size": 4},
        "warm_start": {"steps": 20, "num_demos": 200},
        "budget": {"launched_tokens": 200},
        "arms": {"grpo": {"preset": "grpo"}},
    }
    out = run_experiment(cfg, "--no-progress")
    evals = query(out, "SELECT step, n, score, eval_verifier_calls FROM evals ORDER BY step")
    led = query(out, "SELECT max(verifier_calls), max(env_steps) FROM ledger")[0]
    assert evals and all(n == 18 and calls == 18 and 0 <= s <= 1 for _, n, s, calls in evals)
    assert led[0] == led[1] > 0  # one verifier call per (single-turn) episode
