"""``sixblanks findings``: published claims checked at matched budgets, each ending in a verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .app import STATE, JsonOpt, app, dump_json, err, say, warn


@app.command()
def findings(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(help="Finding files or directories of them (default experiments/findings)."),
    ] = None,
    out_dir: Annotated[
        Path, typer.Option("--out", help="Output directory (one folder per claim).")
    ] = Path("runs/findings"),
    readme: Annotated[
        Path | None,
        typer.Option(
            "--readme", help="Also write the table of verdicts into this file's findings block."
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run each claim (seeds added in batches until its arms separate or the cap is reached) and
    write the findings report: a verdict per claim and budget axis, the effect with its interval,
    the seeds used, the budget spent and the smallest detectable effect. Resumable: finished runs
    are kept; one process at a time per output directory."""

    from sixblanks.reports.findings import build_findings_report, load_verdicts, update_readme

    from ..orchestration.outlock import OutDirLock
    from ..studies.findings import finding_files, run_finding

    files = finding_files(paths or [Path("experiments/findings")])
    log = (
        (lambda m: err.print(f"[dim]{m}[/dim]"))
        if not (STATE["quiet"] or as_json)
        else (lambda m: None)
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    records = []
    with OutDirLock(out_dir, "findings", log=warn):
        for i, f in enumerate(files, 1):
            log(f"claim {i}/{len(files)}: {f}")
            records.append(run_finding(f, out_dir, log))
        report = build_findings_report(out_dir)
    if readme is not None:
        update_readme(readme, load_verdicts(out_dir))
    if as_json:
        dump_json(records)
        return
    for r in records:
        for ax in r["axes"]:
            e = ax["effect"]
            say(
                f"{r['name']} ({ax['axis']}): [bold]{ax['verdict']}[/bold] "
                f"({r['arm']} − {r['than']} {e['diff']:+.3f}, 95% CI {e['low']:+.3f} to {e['high']:+.3f}, "
                f"{ax['seeds']} seeds per arm)"
            )
    say(f"report: {report}")
