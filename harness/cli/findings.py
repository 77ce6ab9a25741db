"""``sixblanks findings``: published claims checked at matched budgets, each ending in a verdict."""

from __future__ import annotations

import json
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
            "--readme",
            help="Also write the table of verdicts, made from the summaries, into this file's "
            "findings block (needs --summaries).",
        ),
    ] = None,
    summaries: Annotated[
        Path | None,
        typer.Option(
            "--summaries",
            help="Write each claim's summary (criterion hash, per-seed values, interval, rule, "
            "verdicts, commit) here as <claim>.json, refusing a claim whose criterion differs "
            "from its committed summary's without an amendment.",
        ),
    ] = None,
    adjustment: Annotated[
        str,
        typer.Option(
            "--adjust",
            help="How verdicts are adjusted across the family of claims run together: holm "
            "(family-wise error) or bh (Benjamini-Hochberg, false discovery rate).",
        ),
    ] = "holm",
    as_json: JsonOpt = False,
) -> None:
    """Run each claim (seeds added in batches until its arms separate or the cap is reached) and
    write the findings report: a verdict per claim and budget axis, the effect with its interval,
    the seeds used, the budget spent and the smallest detectable effect. Resumable: finished runs
    are kept; one process at a time per output directory."""

    _check_options(adjustment, readme, summaries)
    files, family = _checked_family(paths or [Path("experiments/findings")], summaries)
    log = (
        (lambda m: err.print(f"[dim]{m}[/dim]"))
        if not (STATE["quiet"] or as_json)
        else (lambda m: None)
    )
    records, report = _run_family(files, out_dir, log, family, adjustment)
    if summaries is not None:
        _write_summaries(records, summaries, readme)
    if as_json:
        dump_json(records)
        return
    for r in records:
        _say_record(r, adjustment)
    say(f"report: {report}")


def _check_options(adjustment: str, readme: Path | None, summaries: Path | None) -> None:
    """A ConfigError for an unknown ``--adjust`` or a ``--readme`` without ``--summaries``."""

    from ..errors import ConfigError
    from ..studies.findings import ADJUSTMENTS

    if adjustment not in ADJUSTMENTS:
        raise ConfigError(f"--adjust {adjustment}: unknown (valid: {', '.join(ADJUSTMENTS)})")
    if readme is not None and summaries is None:
        raise ConfigError("--readme: the table is made from the summaries; give --summaries DIR")


def _checked_family(paths: list[Path], summaries: Path | None) -> tuple[list[Path], int]:
    """The finding files named and the family's number of comparisons; every file is checked, and
    every criterion against its committed summary, before anything runs."""

    from ..studies.findings import (
        check_criterion,
        checked_finding,
        comparisons,
        finding_files,
        recorded_summary,
    )

    files = finding_files(paths)
    checked = [checked_finding(f)[0] for f in files]
    if summaries is not None:
        for f in checked:
            check_criterion(f, recorded_summary(summaries, f), str(summaries / f"{f.name}.json"))
    return files, sum(comparisons(f) for f in checked)


def _run_family(
    files: list[Path], out_dir: Path, log, family: int, adjustment: str
) -> tuple[list[dict], Path]:
    """Every claim run under the output directory's lock, the verdicts adjusted across the family
    and rewritten with the claims that share runs; returns the records and the report's path."""

    from sixblanks.reports.findings import build_findings_report

    from ..orchestration.outlock import OutDirLock
    from ..studies.findings import adjust, run_finding, shared_runs

    out_dir.mkdir(parents=True, exist_ok=True)
    records = []
    with OutDirLock(out_dir, "findings", log=warn):
        for i, f in enumerate(files, 1):
            log(f"claim {i}/{len(files)}: {f} (alpha shared over {family} comparisons)")
            records.append(run_finding(f, out_dir, log, family))
        adjust(records, adjustment)
        shared = shared_runs(files)
        for r in records:
            r["shared_runs"] = [g for g in shared if any(x.startswith(r["name"] + " ") for x in g)]
            (out_dir / r["name"] / "verdict.json").write_text(
                json.dumps(r, indent=2, default=float)
            )
        report = build_findings_report(out_dir, [r["name"] for r in records])
    return records, report


def _write_summaries(records: list[dict], summaries: Path, readme: Path | None) -> None:
    """Each claim's summary as ``summaries/<claim>.json``, then README's table made from them."""

    from sixblanks.reports.findings import load_summaries, update_readme

    from ..studies.findings import summary

    summaries.mkdir(parents=True, exist_ok=True)
    commit = _commit()
    for r in records:
        (summaries / f"{r['name']}.json").write_text(
            json.dumps(summary(r, commit), indent=2) + "\n"
        )
    if readme is not None:
        update_readme(readme, load_summaries(summaries))


def _say_record(r: dict, adjustment: str) -> None:
    """A claim's verdict per budget axis, in the family and alone, and the runs it took over."""

    for ax in r["axes"]:
        if "comparisons" in ax:
            say(_several(r, ax, adjustment))
            continue
        e, fam = ax["interval"], ax["family"]
        say(
            f"{r['name']} ({ax['axis']}): [bold]{fam['verdict']}[/bold] in the family "
            f"({adjustment}, adjusted p {fam['adjusted_p']:.3g}; alone: {ax['verdict']}) "
            f"({r['arm']} − {r['than']} {e['estimate']:+.3f}, interval {fam['low']:+.3f} to "
            f"{fam['high']:+.3f}, {ax['seeds']} seeds per arm)"
        )
    for ax in (a for a in r["axes"] if (a.get("shared") or {}).get("runs")):
        whence = ", ".join(f"{n} from {k}" for k, n in ax["shared"]["from"].items())
        say(f"{r['name']} ({ax['axis']}): {ax['shared']['runs']} run(s) shared ({whence})")


def _several(r: dict, ax: dict, adjustment: str) -> str:
    """A claim of several comparisons (k arms, an interaction): its combined verdict, then each
    comparison's estimate and interval in the family."""

    fam = ax["family"]
    parts = "; ".join(
        f"{c['label']} {c['interval']['estimate']:+.3f}, interval {c['family']['low']:+.3f} to "
        f"{c['family']['high']:+.3f}: {c['family']['verdict']}"
        for c in ax["comparisons"]
    )
    return (
        f"{r['name']} ({ax['axis']}): [bold]{fam['verdict']}[/bold] in the family ({adjustment}, "
        f"largest adjusted p {fam['adjusted_p']:.3g}; alone: {ax['verdict']}) ({parts}; "
        f"{ax['seeds']} seeds per arm)"
    )


def _commit() -> str:
    """The commit the verdicts were measured at (``+dirty`` with uncommitted changes to tracked
    files), or the code fingerprint outside a git checkout."""

    import subprocess

    from ..version import code_fingerprint

    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty=+dirty", "--abbrev=12"],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return code_fingerprint()
