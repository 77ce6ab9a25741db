"""The Python API (`import sixblanks`): run, load, errors. The notebook-style example
(examples/notebook.py) runs as documented, and what it returns is what the store holds."""

import runpy
import subprocess
import sys

import pytest

from .conftest import ROOT


@pytest.mark.slow
def test_the_notebook_example_runs_and_its_results_are_the_stores(tmp_path, monkeypatch):
    """The example, cell by cell as a notebook would (one process): two arms x two seeds, then the
    same results read back. Its scores are the per-run rows the report writes (scores.csv), and its
    ledger rows add up to what each run's result recorded."""

    import polars as pl

    monkeypatch.chdir(tmp_path)
    ns = runpy.run_path(str(ROOT / "examples" / "notebook.py"))
    results = ns["results"]
    assert sorted(results.scores["arm"].unique()) == ["grpo", "rloo"] and results.scores.height == 4
    assert results.split == "test"
    csv = pl.read_csv(tmp_path / "runs" / "notebook" / "report" / "scores.csv")
    assert csv.sort("run_id")["final_score"].to_list() == pytest.approx(
        results.scores.sort("run_id")["final_score"].to_list()
    )
    import json

    for rid in results.runs["run_id"]:
        res = json.loads(
            (tmp_path / "runs" / "notebook" / "runs" / rid / "result.json").read_text()
        )
        last = results.ledger.filter(pl.col("run_id") == rid).sort("step").tail(1)
        assert last["launched_tokens"][0] == res["counters"]["launched_tokens"]
    # a second run adds nothing: every run was finished
    import sixblanks

    again = sixblanks.run(ns["experiment"], out="runs/notebook")
    assert again.runs.height == 4 and again.scores.equals(results.scores)


def test_bad_experiments_and_missing_results_are_named(tmp_path):
    import sixblanks
    from sixblanks.harness.errors import ConfigError
    from sixblanks.reports.data import ReportError

    with pytest.raises(ConfigError) as err:
        sixblanks.run({"arms": {"a": {"preset": "grpoo"}}}, out=tmp_path / "o")
    assert any("arms.a.preset: unknown preset 'grpoo'" in p for p in err.value.problems)
    with pytest.raises(ConfigError, match="an experiment is a YAML file's path, a mapping"):
        sixblanks.run(42)
    with pytest.raises(ReportError, match="no results store"):
        sixblanks.load(tmp_path / "nothing")
    assert not (tmp_path / "o").exists()  # nothing was started


def test_import_sixblanks_is_light():
    """`import sixblanks` loads neither torch nor the harness: the API imports them when called."""

    code = (
        "import sys, sixblanks; print('torch' in sys.modules, 'sixblanks.harness' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
