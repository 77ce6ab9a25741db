"""Commands of experiments about experiments: ``ladder`` (the ablation ladder) and ``sweep`` (the
hyperparameter search under a fixed budget)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.table import Table

from ..layout import ExperimentDir
from .app import (
    STATE,
    AddOpt,
    AllRungsOpt,
    ArmOpt,
    ConfigArg,
    JsonOpt,
    OutOpt,
    app,
    dump_json,
    err,
    human,
    say,
    show,
    warn,
)


@app.command()
def ladder(
    config: ConfigArg = Path("experiments.yaml"),
    arm: ArmOpt = None,
    all_: AllRungsOpt = False,
    out_dir: OutOpt = None,
    as_json: JsonOpt = False,
    add: AddOpt = False,
) -> None:
    """Walk the ablation ladder for one arm, one axis at a time; stop at the first failing rung."""

    from ..config import load_config
    from ..orchestration.command import claimed, out_dir_of
    from ..orchestration.data_files import check_data_files
    from ..studies.ladder import VERDICT, Ladder, LadderFailed, first_failure

    cfg = load_config(config)
    check_data_files(cfg)
    out_path = out_dir_of(cfg, out_dir)
    log = (lambda m: err.print(f"[dim]{m}[/dim]")) if not (STATE["quiet"] or as_json) else None
    with claimed(out_path, cfg, "ladder", add, warn):
        results = Ladder(cfg, out_path, arm, log=log).run(all_rungs=all_)
    if as_json:
        from dataclasses import asdict

        dump_json([asdict(r) for r in results])
    else:
        table = Table(title=f"ablation ladder: {arm or cfg.ladder.arm or next(iter(cfg.arms))}")
        for col in ("rung", "variant", "status", "evidence"):
            table.add_column(col)
        colors = {"pass": "green", "fail": "red", "inconclusive": "yellow"}
        for r in results:  # each rung's rows, then its one verdict row (bold, closing the section)
            is_verdict = r.variant == VERDICT
            table.add_row(
                f"{r.rung} {r.rung_name}",
                r.variant,
                f"[{colors[r.status]}]{r.status}[/]",
                r.evidence,
                style="bold" if is_verdict else None,
                end_section=is_verdict,
            )
        show(table)
        exp_dir = ExperimentDir(out_path)
        say(f"recorded in {exp_dir.results_db} (table ladder) and {exp_dir.ladder}")
    failed = first_failure(results)
    if failed is not None:
        raise LadderFailed(f"rung {failed.rung} ({failed.rung_name}) failed: {failed.evidence}")


@app.command()
def sweep(
    config: ConfigArg = Path("experiments.yaml"),
    out_dir: OutOpt = None,
    add: AddOpt = False,
) -> None:
    """Hyperparameter search per arm under a fixed search budget, then confirmation on fresh
    seeds."""

    from ..config import load_config
    from ..orchestration.command import build_report_checked, claimed, out_dir_of
    from ..orchestration.data_files import check_data_files
    from ..studies.sweep import Sweep

    cfg = load_config(config)
    check_data_files(cfg)
    out_path = out_dir_of(cfg, out_dir)
    log = (lambda m: err.print(f"[dim]{m}[/dim]")) if not STATE["quiet"] else None
    with claimed(out_path, cfg, "sweep", add, warn):
        sw = Sweep(cfg, out_path, log=log)
        summary = sw.run()
    table = Table(title="search effort per arm")
    for col in (
        "arm",
        "trials",
        "complete",
        "pruned",
        "failed",
        "launched tokens",
        "device-hours",
        "best value",
        "best params",
    ):
        table.add_column(col)
    for arm, rec in summary["arms"].items():
        table.add_row(
            arm,
            str(rec["trials"]),
            str(rec["complete"]),
            str(rec["pruned"]),
            str(rec["failed"]),
            human(rec["spent"]["launched_tokens"]),
            f"{rec['spent']['device_seconds'] / 3600:.4f}",
            "-" if rec["best_value"] is None else f"{rec['best_value']:.3f}",
            json.dumps(rec["best_params"]),
        )
    say(table)
    if not summary["confirm"]["runs"]:
        say(
            f"no confirmation runs ({summary['confirm'].get('skipped', 'none finished')}): "
            f"no report; the trials are in {sw.out / 'results.duckdb'}"
        )
        return
    report_path = build_report_checked(sw.out)
    say(f"report (defaults vs tuned, search effort): {report_path}")
