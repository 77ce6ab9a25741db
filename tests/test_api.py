"""The Python API (`import sixblanks`): run, load, errors. The notebook-style example
(examples/notebook.py) runs as documented, and what it returns is what the store holds."""

import ast
import json
import subprocess
import sys

import pytest

from .conftest import ROOT


def run_script(path, cwd) -> None:
    """``python path`` in ``cwd``, as a user runs a script: no ``__main__`` guard in it, so a
    worker that imported the script would run the experiment again (and die on the lock)."""

    proc = subprocess.run(
        [sys.executable, str(path)], cwd=cwd, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "DirectoryBusy" not in proc.stderr and "BrokenProcessPool" not in proc.stderr


@pytest.mark.slow
def test_the_notebook_example_runs_as_a_script_and_its_results_are_the_stores(tmp_path):
    """`python examples/notebook.py`, as documented (its workers must not run it again): two arms
    x two seeds, then the same results read back. Its scores are the per-run rows the report writes
    (scores.csv), and its ledger rows add up to what each run's result recorded."""

    import json

    import polars as pl

    import sixblanks

    run_script(ROOT / "examples" / "notebook.py", tmp_path)
    out = tmp_path / "runs" / "notebook"
    results = sixblanks.load(out)
    assert sorted(results.scores["arm"].unique()) == ["grpo", "rloo"] and results.scores.height == 4
    assert results.split == "test"
    csv = pl.read_csv(out / "report" / "scores.csv")
    assert csv.sort("run_id")["final_score"].to_list() == pytest.approx(
        results.scores.sort("run_id")["final_score"].to_list()
    )
    for rid in results.runs["run_id"]:
        res = json.loads((out / "runs" / rid / "result.json").read_text())
        last = results.ledger.filter(pl.col("run_id") == rid).sort("step").tail(1)
        assert last["launched_tokens"][0] == res["counters"]["launched_tokens"]
    # a second run adds nothing: every run was finished
    source = ast.parse((ROOT / "examples" / "notebook.py").read_text())
    (node,) = [
        n for n in source.body if isinstance(n, ast.Assign) and n.targets[0].id == "experiment"
    ]
    again = sixblanks.run(ast.literal_eval(node.value), out=out)
    assert again.runs.height == 4 and again.scores.equals(results.scores)


@pytest.mark.slow
def test_the_readmes_python_snippet_runs_as_a_script(tmp_path):
    """README's "From Python" lines as a script of their own (the experiment file swapped for a
    one-run one, the rest as written)."""

    import re

    import sixblanks

    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## From Python") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert 'sixblanks.run("experiments.yaml", out="runs/demo")' in code
    tiny = {
        "name": "demo",
        "task": {"name": "arithmetic", "eval_size": 8},
        "rollout": {"max_new_tokens": 6, "prompts_per_step": 2, "group_size": 2},
        "warm_start": {"steps": 5, "num_demos": 40},
        "budget": {"launched_tokens": 48},
        "seeds": [0],
        "arms": {"grpo": {"preset": "grpo"}},
        "tracking": {"mlflow": False},
    }
    (tmp_path / "experiments.yaml").write_text(json.dumps(tiny))
    (tmp_path / "snippet.py").write_text(code)
    run_script(tmp_path / "snippet.py", tmp_path)
    assert sixblanks.load(tmp_path / "runs" / "demo").scores.height == 1


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


def test_results_summary_and_verdicts_are_the_reports(tmp_path):
    """`sixblanks.load(out).summary()`: per arm its mean final score and 95% t interval over seeds
    (by hand with scipy on the planted finals), its seeds and runs; `.verdicts()`: the report's
    sentences, one per pair, the higher-scoring arm first."""

    import numpy as np
    import polars as pl
    from scipy import stats as sps

    import sixblanks
    from sixblanks.reports.build import build_report

    from .test_report_summary import SEEDS, finals, plant

    out = plant(tmp_path)
    results = sixblanks.load(out)
    summary = results.summary()
    assert isinstance(summary, pl.DataFrame)
    assert summary.columns == ["arm", "mean", "low", "high", "seeds", "finished", "runs", "split"]
    assert summary["arm"].to_list() == list(SEEDS)
    for r in summary.iter_rows(named=True):
        x = finals(r["arm"])
        lo, hi = sps.t.interval(0.95, len(x) - 1, loc=np.mean(x), scale=sps.sem(x))
        assert (r["mean"], r["low"], r["high"]) == pytest.approx((np.mean(x), lo, hi))
        assert r["seeds"] == r["runs"] == len(SEEDS[r["arm"]]) and r["split"] == "test"
    verdicts = results.verdicts()
    assert len(verdicts) == 3 and verdicts[0].startswith("dapo > grpo: paired difference ")
    index = build_report(out, resamples=100, with_plots=False)
    md = (index.parent / "report.md").read_text()
    assert all(v in md for v in verdicts)
