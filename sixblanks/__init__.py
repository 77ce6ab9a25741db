"""sixblanks from Python: run an experiment, walk the ablation ladder, search hyperparameters, and
read the results as polars frames, with no shell in between.

    import sixblanks

    results = sixblanks.run("experiments.yaml", out="runs/demo")  # the same work as `sixblanks run`
    results.scores           # one row per run: arm, task, seed, start and final score, ...
    results.table("ledger")  # any table of the results store
    sixblanks.load("runs/demo").scores  # later, from the output directory alone

An experiment is a YAML file's path, a mapping with the same keys, or a parsed
:class:`~sixblanks.harness.config.ExperimentConfig`. A bad one raises
:class:`~sixblanks.harness.errors.ConfigError` listing every problem (``.problems``), before
anything runs. The work is the command line's: a re-run skips finished runs and resumes unfinished
ones, the output directory is locked and holds one definition of the experiment, the report is
written to ``OUT/report/``.

The packages below are the rest of the library: ``sixblanks.algorithms`` (the six blanks, presets
and losses, pure torch), ``sixblanks.budgets`` (the ledger), ``sixblanks.harness`` (everything that
runs) and ``sixblanks.reports`` (statistics and the report).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

# In a source checkout the library's parts are folders beside this one (harness/, algorithms/,
# budgets/, reports/): they are found there, so a second checkout of the repository (a git worktree,
# a clean clone) runs its own code in an environment installed from another. An installed wheel
# holds them inside this folder, where they are found first.
_CHECKOUT = Path(__file__).resolve().parent.parent
if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "harness" / "__init__.py").is_file():
    __path__.append(str(_CHECKOUT))

__all__ = ["Results", "load", "run", "ladder", "sweep"]


@dataclass(frozen=True)
class Results:
    """An experiment's results, read from ``OUT/results.duckdb`` (read-only: a run in progress can
    keep writing).

    ``scores``: one row per run (``run_id, arm, preset, task, seed, status, split, start_score,
    final_score, final_step, auc_launched``, pass@k where sampled), the scores of the held-out split
    the report shows (``split``). ``runs``: one row per run as the store holds it. ``evals``: every
    evaluation (its step, split, score and place on every budget axis). ``ledger``: every run's
    counters after each step. ``fairness``: the fairness audit's items. ``summary()`` and
    ``verdicts()``: who won, as the report's summary says it.
    """

    out: Path
    name: str
    config: dict[str, Any]
    split: str | None
    runs: pl.DataFrame
    scores: pl.DataFrame
    evals: pl.DataFrame
    ledger: pl.DataFrame
    fairness: pl.DataFrame

    def table(self, name: str) -> pl.DataFrame:
        """Any table of the results store (``runs``, ``evals``, ``ledger``, ``metrics``,
        ``budgets``, ``trials``, ``ladder``, ...), as it is stored."""

        return _read_table(self.out, name)

    def summary(self) -> pl.DataFrame:
        """One row per arm: ``arm, mean, low, high, seeds, finished, runs, split``. ``mean`` is the
        mean final score of its finished runs on ``split`` (normalized per task where the tasks
        differ in scale), ``low``/``high`` its 95% Student t interval over the seeds (null with
        fewer than two); the report's summary, from the store as it is now."""

        from sixblanks.reports.build import summary_of

        return summary_of(self.out).arms

    def verdicts(self) -> list[str]:
        """One sentence per pair of arms sharing seeds, the higher-scoring arm first, e.g. "dapo >
        grpo: paired difference 0.086 [0.028, 0.144] (2 seeds × 64 instances), separated." or
        "... no separation ..."; the report's summary, from the store as it is now."""

        from sixblanks.reports.build import summary_of

        return summary_of(self.out).sentences


def _read_table(out: Path, name: str) -> pl.DataFrame:
    from sixblanks.reports.data import ReportError, connect

    con = connect(out)
    try:
        have = {
            r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
        }
        if name not in have:
            raise ReportError(
                f"{out}: no table '{name}' in the results store (tables: {', '.join(sorted(have))})"
            )
        return con.sql(f'SELECT * FROM "{name}"').pl()
    finally:
        con.close()


def load(out: str | Path, baseline: str | None = None) -> Results:
    """The results in the output directory ``out`` (what ``sixblanks run``, ``ladder`` or the
    confirmation runs of ``sweep`` wrote there). ``baseline``: the arm the report compares with
    (default: the first); an unknown one is refused, naming the arms."""

    from sixblanks.reports.build import load as load_data
    from sixblanks.reports.tables import run_scores

    out = Path(out)
    data = load_data(out, baseline)
    return Results(
        out=out,
        name=data.name,
        config=data.config,
        split=data.split,
        runs=data.runs,
        scores=run_scores(data),
        evals=data.evals,
        ledger=_read_table(out, "ledger"),
        fairness=data.fairness,
    )


def run(
    config: Any,
    out: str | Path | None = None,
    *,
    progress: bool = False,
    reuse_finished: bool = False,
    add: bool = False,
    log: Any = None,
) -> Results:
    """Run every arm x task x seed of ``config`` under its matched budget into ``out`` (default
    ``runs/<name>``), build the report, and return the results (:func:`load`).

    ``progress``: live progress bars on a terminal. ``reuse_finished``: reuse finished runs made
    by other code (the audit flags them). ``add``: add a changed definition to a directory that
    holds another one. ``log``: a callable taking each progress line (default: silent). Runs that
    failed raise :class:`~sixblanks.harness.orchestration.orchestrator.RunFailed` after the report
    is written (the results of the others are in ``out``); Ctrl-C raises
    :class:`~sixblanks.harness.orchestration.interrupts.Interrupted` with the runs left resumable.
    """

    from sixblanks.harness.orchestration.command import as_config, out_dir_of, run_experiment
    from sixblanks.harness.orchestration.orchestrator import RunFailed

    cfg = as_config(config)
    out_path = out_dir_of(cfg, out)
    result, _ = run_experiment(
        cfg,
        out_path,
        log=log,
        warn=log,
        progress=progress,
        reuse_finished=reuse_finished,
        add=add,
    )
    if result["failures"]:
        raise RunFailed([f"run {rid} failed: {e}" for rid, e in result["failures"].items()])
    return load(out_path)


def ladder(
    config: Any,
    out: str | Path | None = None,
    *,
    arm: str | None = None,
    all_rungs: bool = False,
    add: bool = False,
    log: Any = None,
) -> pl.DataFrame:
    """Walk the ablation ladder for ``arm`` (default: ``ladder.arm`` or the first arm), one axis at
    a time, stopping at the first failing rung unless ``all_rungs``. Returns the rungs' rows (rung,
    name, variant, status, evidence), each rung's verdict row last; they are also in
    ``OUT/ladder.json`` and the store's ``ladder`` table. A failing rung is a result, not an error.
    """

    import polars as pl

    from sixblanks.harness.orchestration.command import as_config, claimed, out_dir_of
    from sixblanks.harness.studies.ladder import Ladder

    cfg = as_config(config)
    out_path = out_dir_of(cfg, out)
    with claimed(out_path, cfg, "ladder", add, log):
        rungs = Ladder(cfg, out_path, arm, log=log).run(all_rungs=all_rungs)
    return pl.DataFrame(
        [
            {
                "rung": r.rung,
                "rung_name": r.rung_name,
                "variant": r.variant,
                "status": r.status,
                "evidence": r.evidence,
            }
            for r in rungs
        ]
    )


def sweep(
    config: Any, out: str | Path | None = None, *, add: bool = False, log: Any = None
) -> dict[str, Any]:
    """The hyperparameter search of ``config``'s ``sweep`` section: per arm, trials under the fixed
    search budget, then confirmation runs of the best settings on fresh seeds. Returns the search's
    summary (per arm: trials, their states, what they spent, the best value and parameters) with,
    under ``"results"``, the confirmation runs' :class:`Results` (None when none finished).
    """

    from sixblanks.harness.orchestration.command import (
        as_config,
        build_report_checked,
        claimed,
        out_dir_of,
    )
    from sixblanks.harness.studies.sweep import Sweep

    cfg = as_config(config)
    out_path = out_dir_of(cfg, out)
    with claimed(out_path, cfg, "sweep", add, log):
        search = Sweep(cfg, out_path, log=log)
        summary = search.run()
    results = None
    if summary["confirm"]["runs"]:
        build_report_checked(search.out)
        results = load(search.out)
    return {**summary, "results": results}
