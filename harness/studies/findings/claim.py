"""A claim run end to end: its file checked (the form, the arms, the seed plan, the criterion
against the one recorded at its first launch), its looks run per budget axis (or over both
budgets of an interaction), and its verdict written to ``OUT/<claim>/verdict.json``; the
committed summary made from it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ...config.finding_file import Finding, criterion_hash, load_finding
from ...errors import ConfigError
from ...orchestration.command import as_config
from .amended import under
from .looks import Log, run_looks
from .records import many_record, two_arm_record
from .runs import arm_settings, experiment_mapping, undeclared_differences
from .verdicts import seed_design


def checked_finding(path: str | Path) -> tuple[Finding, Any]:
    """(the finding file at ``path``, its experiment at the pilot's seeds), refused with a
    ConfigError where it is invalid or its arms differ beyond what the claim is about."""

    f = load_finding(path)
    m = f.finding
    # a criterion is fixed before its data: one that differs from the committed summary's beside
    # the file (``results/<claim>.json``) needs an amendment
    committed = Path(path).parent / SUMMARIES / f"{f.name}.json"
    check_criterion(f, recorded_summary(committed.parent, f), str(committed))
    if m.seeds.cap is not None:
        try:  # a seed plan with a look that can never stop, even alone
            seed_design(m.criterion(), m.alpha)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    cfg = as_config(experiment_mapping(f, "check", f.experiment.get("budget") or {}, 2))
    # every arm against the first: a difference between any two shows against one of them
    first, *rest = m.claim_arms()
    for other in rest:
        extra = undeclared_differences(cfg, first, other, m.about)
        if extra:
            raise ConfigError(
                f"{path}: arms '{first}' and '{other}' differ beyond what the claim is about "
                f"({', '.join(m.about)}): " + "; ".join(extra)
            )
    return f, cfg


def comparisons(f: Finding) -> int:
    """How many comparisons a claim adds to its family: per budget axis one (two arms) or the
    k − 1 pairs it implies (best against each other arm, or each adjacent pair of an ordering);
    an interaction one (grows) or two (changes_sign: a side at each budget)."""

    m = f.finding
    axes = len(m.budgets or {"budget": None})
    if m.form == "many":
        return axes * (len(m.arms) - 1)
    if m.form == "interaction":
        return 1 if m.expect == "grows" else 2
    return axes


def check_criterion(f: Finding, recorded: dict[str, Any] | None, where: str) -> None:
    """Refuse a claim whose criterion differs from the one ``recorded`` at its first launch (in
    ``where``) unless an amendment in the file records the change and its reason."""

    if not recorded:
        return
    versions = f.finding.criterion_versions()
    hashes = [criterion_hash(v) for v in versions]
    if recorded.get("hash") in hashes:
        return
    was = recorded.get("criterion") or {}
    now = versions[-1]
    changed = [f"{k}: {was.get(k)!r} -> {now.get(k)!r}" for k in now if was.get(k) != now.get(k)]
    raise ConfigError(
        f"{f.path}: the claim's criterion changed since it first ran ({where}): "
        + "; ".join(changed or ["(hash differs)"])
        + ". A criterion is fixed before its data: add an entry to finding.amendments with the "
        "fields as they were (`was:`) and the reason, or run it into a new output directory"
    )


def run_finding(path: Path, out: Path, log: Log, family: int = 1) -> dict[str, Any]:
    """One claim, every budget axis, each stopped at its alpha shared over ``family``
    comparisons (Bonferroni: the level Holm's and Benjamini-Hochberg's step-downs start from, so a
    claim that separates here survives either adjustment); writes and returns
    OUT/<claim>/verdict.json's content (its ``family`` block is filled by :func:`adjust`)."""

    f, _ = checked_finding(path)
    claim_dir = out / f.name
    recorded = first_launch(f, claim_dir)
    level = f.finding.alpha / family
    budgets = f.finding.budgets or {"budget": dict(f.experiment.get("budget") or {})}
    budgets = {axis: dict(b) for axis, b in budgets.items()}
    if f.finding.form == "interaction":  # both budgets at every look: the same seeds at each
        axes = [many_record(f, budgets, run_looks(f, budgets, claim_dir, log, level), claim_dir)]
    else:
        axes = [_axis(f, axis, b, claim_dir, log, level) for axis, b in budgets.items()]
    record = verdict_record(f, path, recorded, axes, family)
    versions = f.finding.criterion_versions()
    for ax in axes:
        ax["metric"] = f.finding.metric
        # the verdict under every earlier version of the criterion, from the same seeds
        ax["under_amendments"] = [
            under(versions[i], versions[-1], ax, family) for i in range(len(f.finding.amendments))
        ]
    claim_dir.mkdir(parents=True, exist_ok=True)
    (claim_dir / "verdict.json").write_text(json.dumps(record, indent=2, default=float))
    return record


def first_launch(f: Finding, claim_dir: Path) -> dict[str, Any]:
    """The criterion recorded at the claim's first launch (``claim_dir/criterion.json``: its
    hash, the criterion and when), checked against the file's; written now where this is the
    first launch, so the criterion is fixed before any of the claim's data exists."""

    first = claim_dir / "criterion.json"
    recorded = json.loads(first.read_text()) if first.is_file() else None
    check_criterion(f, recorded, str(first))
    if recorded is not None:
        return recorded
    now = f.finding.criterion_versions()[-1]
    claim_dir.mkdir(parents=True, exist_ok=True)
    first.write_text(
        json.dumps({"hash": criterion_hash(now), "criterion": now, "at": time.time()}, indent=2)
    )
    return json.loads(first.read_text())


def verdict_record(
    f: Finding, path: Path, recorded: dict[str, Any], axes: list[dict], family: int
) -> dict[str, Any]:
    """The verdict's content: the claim as its file states it, the criterion (and each amendment's
    earlier version), its first launch, the family's size and the ``axes``' records."""

    m = f.finding
    versions = m.criterion_versions()
    return {
        "name": f.name,
        "path": str(path),
        "claim": m.claim,
        "source": m.source,
        "about": m.about,
        "arm": m.arm,
        "than": m.than,
        "form": m.form,
        "arms": m.claim_arms(),
        "between": m.between,
        "metric": m.metric if m.metric == "final_score" else f"{m.aggregate} of {m.metric}",
        "expect": m.expect,
        "smallest_effect": m.smallest_effect,
        "alpha": m.alpha,
        "meaning": m.meaning,
        "criterion": versions[-1],
        "criterion_hash": criterion_hash(versions[-1]),
        "first_launch": recorded,
        "amendments": [
            {
                "was": versions[i],
                "was_hash": criterion_hash(versions[i]),
                "reason": a.reason,
                "date": a.date,
            }
            for i, a in enumerate(m.amendments)
        ],
        "family_size": family,
        "axes": axes,
        "written_at": time.time(),
    }


def _axis(f: Finding, axis: str, budget: dict, claim_dir: Path, log, level: float) -> dict:
    run = run_looks(f, {axis: budget}, claim_dir, log, level)
    if f.finding.form == "many":
        return many_record(f, {axis: budget}, run, claim_dir)
    return two_arm_record(f, axis, budget, run, claim_dir / axis)


SUMMARIES = "results"
"""The folder beside the finding files that holds their committed summaries."""

SUMMARY_DROP = ("path", "written_at", "first_launch")


def summary(record: dict[str, Any], commit: str) -> dict[str, Any]:
    """What is committed of a claim's verdict (``experiments/findings/results/<claim>.json``): the
    criterion and its hash, the amendments with the verdict under each, per axis the per-seed
    values, the decision's interval, the rule applied, the verdict alone and in its family, the
    budget spent and the audit's flags; and the commit it was measured at."""

    out = {k: v for k, v in record.items() if k not in SUMMARY_DROP}
    out["commit"] = commit
    out["axes"] = [{k: v for k, v in ax.items() if k != "seconds"} for ax in record["axes"]]
    return json.loads(json.dumps(out, default=float))


def recorded_summary(summaries: Path, f: Finding) -> dict[str, Any] | None:
    """The committed summary of ``f`` under ``summaries`` as a first-launch record, or None."""

    p = summaries / f"{f.name}.json"
    if not p.is_file():
        return None
    data = json.loads(p.read_text())
    return {"hash": data.get("criterion_hash"), "criterion": data.get("criterion")}


def shared_runs(paths: list[Path]) -> list[list[str]]:
    """Groups of arms of different claims that run the same configuration on the same budget and
    seeds (``"claim (axis): arm"`` each), so the report can say which claims share a control: the
    same runs (trained once, by the first claim that needs them), so their verdicts are not
    independent."""

    seen: dict[str, list[str]] = {}
    for path in paths:
        f, cfg = checked_finding(path)
        base = {k: v for k, v in f.experiment.items() if k not in ("arms", "name", "seeds")}
        axes = f.finding.budgets or {"budget": base.get("budget") or {}}
        for axis, budget in axes.items():
            for arm in f.finding.claim_arms():
                key = criterion_hash(
                    {"settings": arm_settings(cfg, arm), **base, "budget": dict(budget)}
                )
                seen.setdefault(key, []).append(f"{f.name} ({axis}): {arm}")
    return sorted(
        (v for v in seen.values() if len({x.split(" ")[0] for x in v}) > 1), key=lambda v: v[0]
    )
