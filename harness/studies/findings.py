"""Findings: published claims checked at matched budgets, with seeds added until the arms separate.

For each claim (a finding file) and each budget axis it names:

1. the two arms must differ in the blanks the claim is about and in nothing else (refused
   otherwise, naming the extra differences);
2. seeds run in batches (a pilot, then ``batch`` more per arm) as an ordinary experiment in
   ``OUT/<claim>/<axis>`` (resumable: finished runs are skipped); each batch's worst case is
   reserved on the claim's ledger before launch, so the claim never spends more than cap x arms x
   the per-run budget;
3. after each batch the group-sequential test (``reports.sequential``) looks at one value per seed
   and arm; it stops when the arms separate or the seed cap is reached;
4. the verdict: ``reproduced`` (separated in the claimed direction, or for an "equal" claim an
   interval inside +-smallest_effect), ``contradicted`` (separated the other way, or an "equal"
   claim separated), ``inconclusive`` (with the smallest effect the seeds used could have seen).

Each claim writes ``OUT/<claim>/verdict.json``; ``reports.findings`` renders them all.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from sixblanks.budgets.ledger import Budget, Ledger
from sixblanks.reports import paired, sequential

from ..config.claims import Finding, criterion_hash, load_finding
from ..errors import ConfigError, SixblanksError
from ..orchestration.experiment import as_config, run_experiment
from ..store.database import connect

Log = Callable[[str], None]


def finding_files(paths: list[str | Path]) -> list[Path]:
    """Finding files named, or every ``*.yaml`` of a named directory (sorted)."""

    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(p.glob("*.yaml"))
        elif p.is_file():
            out.append(p)
        else:
            raise ConfigError(f"{p}: no such finding file or directory")
    if not out:
        raise ConfigError(f"no finding files in {', '.join(map(str, paths))}")
    return out


def _flat(prefix: str, v: Any, out: dict[str, Any]) -> dict[str, Any]:
    if isinstance(v, dict):
        for k, x in v.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), x, out)
    else:
        out[prefix] = v
    return out


def arm_settings(cfg, arm: str) -> dict[str, Any]:
    """Every setting of ``arm`` that can differ between arms, flattened, as the arm runs with it
    (an arm restating the experiment's value does not differ from one that inherits it): its
    resolved blanks (``weight.clip_high``, ...), its optimizer and rollout (``optimizer.lr``,
    ``rollout.temperature``) and its other arm keys (``seed_offset``, ``fault.rewards``, ...)."""

    out = _flat("", cfg.resolved_blanks(arm).model_dump(mode="json"), {})
    effective = {
        "optimizer": cfg.optimizer_for(arm).model_dump(mode="json"),
        "rollout": cfg.rollout_for(arm).model_dump(mode="json"),
    }
    keys = cfg.arms[arm].model_dump(mode="json", exclude={"preset", "blanks", *effective})
    return _flat("", {**keys, **effective}, out)


def undeclared_differences(cfg, a: str, b: str, about: list[str]) -> list[str]:
    """Settings in which arms ``a`` and ``b`` differ that no entry of ``about`` covers."""

    sa, sb = arm_settings(cfg, a), arm_settings(cfg, b)
    differ = sorted(k for k in set(sa) | set(sb) if sa.get(k) != sb.get(k))
    covered = [k for k in differ if any(k == p or k.startswith(p + ".") for p in about)]
    return [f"{k}: {sa.get(k)!r} vs {sb.get(k)!r}" for k in differ if k not in covered]


def per_seed_values(out: Path, f: Finding) -> tuple[dict[str, dict[int, np.ndarray]], str]:
    """``{arm: {seed: values}}`` of the claim's metric in the finished runs of ``out``: the
    per-instance outcomes of the last evaluation (``final_score``) or one aggregate of a training
    metric (shape ``[1]``); and the metric's label."""

    m = f.finding
    con = connect(out, read_only=True)
    try:
        runs = con.execute(
            "SELECT run_id, arm, seed FROM runs WHERE status = 'finished'"
        ).fetchall()
        values: dict[str, dict[int, np.ndarray]] = {}
        for rid, arm, seed in runs:
            if m.metric == "final_score":
                row = con.execute(
                    "SELECT detail FROM evals WHERE run_id = ? AND split = 'test' "
                    "ORDER BY step DESC LIMIT 1",
                    [rid],
                ).fetchone()
                if row is None:
                    continue
                v = np.concatenate([np.asarray(x, float) for x in json.loads(row[0]).values()])
            else:
                pts = con.execute(
                    "SELECT m.value, l.launched_tokens FROM metrics m LEFT JOIN ledger l "
                    "USING (run_id, step) WHERE m.run_id = ? AND m.name = ? ORDER BY m.step",
                    [rid, m.metric],
                ).fetchall()
                if not pts:
                    continue
                v = np.array([aggregate([p[0] for p in pts], [p[1] for p in pts], m.aggregate)])
            values.setdefault(arm, {})[int(seed)] = v
    finally:
        con.close()
    label = m.metric if m.metric == "final_score" else f"{m.aggregate} of {m.metric}"
    return values, label


def aggregate(values: list[float], launched: list[float | None], how: str) -> float:
    """One number per run from a per-step series: its mean, last value, or slope per 1000
    launched tokens (least squares)."""

    v = np.asarray(values, dtype=float)
    if how == "mean":
        return float(np.nanmean(v))
    if how == "last":
        return float(v[-1])
    x = np.asarray([np.nan if c is None else c for c in launched], dtype=float) / 1000.0
    ok = np.isfinite(x) & np.isfinite(v)
    if ok.sum() < 2 or np.ptp(x[ok]) == 0:
        return float("nan")
    return float(np.polyfit(x[ok], v[ok], 1)[0])


def experiment_mapping(
    f: Finding, axis: str, budget: dict[str, float], seeds: int
) -> dict[str, Any]:
    data = json.loads(json.dumps(f.experiment))
    data["name"] = f"{f.name}-{axis}"
    data["budget"] = dict(budget)
    data["seeds"] = list(range(seeds))
    return data


def run_axis(
    f: Finding, axis: str, budget: dict[str, float], out: Path, log: Log, level: float
) -> dict:
    """The sequential comparison of the claim's two arms matched on ``budget``: seeds added until
    the claim is decided at ``level`` (its alpha shared over the family of comparisons run
    together, so that a separation survives the family's adjustment) or the seed cap is reached."""

    m = f.finding
    design = seed_design(m.criterion(), level)
    arms = len(f.experiment["arms"])
    ledger = Ledger(Budget({k: v * arms * design.cap for k, v in budget.items()}))
    started, done, looks = time.time(), 0, []
    values: dict[str, dict[int, np.ndarray]] = {}
    for n in design.interims:
        res = ledger.reserve(
            {k: v * arms * (n - done) for k, v in budget.items()}, f"seeds {done}-{n}"
        )
        if res is None:
            raise SixblanksError(f"{f.name} ({axis}): the ledger refused seeds {done}..{n - 1}")
        cfg = as_config(experiment_mapping(f, axis, budget, n))
        # each look adds seeds to the same experiment: the --add notice is expected, not news
        result, _ = run_experiment(
            cfg, out, add=True, warn=lambda msg: None if msg.startswith("--add") else log(msg)
        )
        if result.get("failures"):
            raise SixblanksError(
                f"{f.name} ({axis}): {len(result['failures'])} run(s) failed; see {out}"
            )
        spent = _consumed(out, budget, range(done, n))
        ledger.commit(res, spent)
        values, label = per_seed_values(out, f)
        d = _differences(f, axis, values, label, n)
        decided = judge(d, m.criterion(), design)
        looks.append({"seeds": n, "verdict": decided["verdict"], "decision": decided["decision"]})
        log(f"{f.name} ({axis}): {n} seeds per arm, {label}: {decided['verdict']}")
        done = n
        if decided["final"]:
            break
    seeds = done
    record = _verdict(f, axis, values, looks, ledger, budget, time.time() - started, design)
    record["audit"] = audit_flags(out, m.arm, m.than)
    record["start"] = start_scores(out, f, seeds)
    record["flags"] = record["start"].pop("flags")
    return record


def _differences(f: Finding, axis: str, values, label: str, n: int) -> np.ndarray:
    """``[n]`` per-seed differences arm − other of the claim's metric, each a run's mean over the
    evaluation's instances (or its one aggregate); a missing or non-finite value refused by name."""

    m = f.finding
    missing = [
        f"{a} seed {s}" for a in (m.arm, m.than) for s in range(n) if s not in values.get(a, {})
    ]
    if missing:
        raise SixblanksError(
            f"{f.name} ({axis}): no {label} recorded for {', '.join(missing)} (is the metric "
            "logged by these arms? see the results store's metrics table)"
        )
    per_seed = {a: np.array([values[a][s].mean() for s in range(n)]) for a in (m.arm, m.than)}
    bad = [f"{a} seed {s}" for a, v in per_seed.items() for s in range(n) if not np.isfinite(v[s])]
    if bad:
        raise SixblanksError(
            f"{f.name} ({axis}): {label} is not a number for {', '.join(bad)} (a slope needs "
            "two steps or more; a metric absent from every step has no mean)"
        )
    return per_seed[m.arm] - per_seed[m.than]


def audit_flags(out: Path, *arms: str) -> list[str]:
    """The fairness audit's flags on the claim's arms (``item: reason``): a difference the claim is
    about shows here too (a planted fault), and so does a run that consumed under 90% of its
    budget; the report prints them beside the verdict."""

    con = connect(out, read_only=True)
    try:
        rows = con.execute(
            "SELECT DISTINCT arm, item, reason FROM fairness WHERE flagged ORDER BY ALL"
        ).fetchall()
    finally:
        con.close()
    return [f"{arm}: {item}: {reason}" for arm, item, reason in rows if arm in arms or arm is None]


def _consumed(out: Path, budget: dict[str, float], seeds) -> dict[str, float]:
    con = connect(out, read_only=True)
    try:
        wanted = list(seeds)
        rows = con.execute(
            "SELECT b.counter, sum(b.consumed) FROM budgets b JOIN runs r USING (run_id) "
            f"WHERE r.seed IN ({', '.join('?' * len(wanted))}) GROUP BY b.counter",
            wanted,
        ).fetchall()
    finally:
        con.close()
    got = {k: float(v) for k, v in rows}
    # time is measured; every other counter is whole units
    return {k: (got.get(k, 0.0) if "seconds" in k else round(got.get(k, 0.0))) for k in budget}


DIRECTIONAL = (sequential.LARGER, sequential.SMALLER)

RULES = {
    "reproduced": "the interval excludes 0 on the claimed side and does not exclude the smallest "
    "effect",
    "present but smaller than claimed": "the interval lies on the claimed side of 0 but short of "
    "the smallest effect",
    "not reproduced at delta": "the interval excludes the smallest effect but not 0",
    "contradicted": "the interval lies wholly on the other side of 0",
    "inconclusive": "the interval contains both 0 and the smallest effect",
}
"""A directional claim's five verdicts, each with its rule in words (``delta`` the smallest
effect that matters, the interval that of the test that decides)."""

MARGIN_RULES = {
    "equal": {
        "reproduced": "the interval lies within ± the smallest effect",
        "contradicted": "the interval lies wholly beyond the smallest effect on one side",
        "inconclusive": "the interval reaches beyond the smallest effect but not wholly",
    },
    "not_smaller": {
        "reproduced": "the interval lies above minus the smallest effect",
        "contradicted": "the interval lies wholly below minus the smallest effect",
        "inconclusive": "the interval contains minus the smallest effect",
    },
    "no_difference": {
        "reproduced": "the sequential test did not separate the arms (the interval contains 0)",
        "contradicted": "the sequential test separated the arms (the interval excludes 0)",
    },
}


def claim_verdict(expect: str, low: float, high: float, delta: float) -> tuple[str, str]:
    """(verdict, its rule in words) from the interval [low, high] of arm minus other given by the
    test that decides, and ``delta`` > 0, the smallest effect that matters.

    larger (smaller: mirrored, the interval negated): *reproduced* where low > 0 and high >= delta;
    *present but smaller than claimed* where 0 < low and high < delta; *not reproduced at delta*
    where high < delta and low <= 0 <= high; *contradicted* where high < 0; *inconclusive* where
    low <= 0 and high >= delta. equal: reproduced inside ±delta, contradicted wholly beyond it on
    one side, else inconclusive. not_smaller ("no worse"): reproduced above -delta, contradicted
    wholly below it, else inconclusive. no_difference (a calibration check): reproduced where the
    interval contains 0 (the arms did not separate), else contradicted."""

    if expect in DIRECTIONAL:
        lo, hi = (low, high) if expect == sequential.LARGER else (-high, -low)
        if hi < 0:
            v = "contradicted"
        elif lo > 0:
            v = "reproduced" if hi >= delta else "present but smaller than claimed"
        else:
            v = "not reproduced at delta" if hi < delta else "inconclusive"
        return v, RULES[v]
    if expect == "equal":
        if low >= -delta and high <= delta:
            v = "reproduced"
        else:
            v = "contradicted" if low > delta or high < -delta else "inconclusive"
    elif expect == "not_smaller":
        v = "reproduced" if low > -delta else "contradicted" if high < -delta else "inconclusive"
    else:
        v = "reproduced" if low <= 0 <= high else "contradicted"
    return v, MARGIN_RULES[expect][v]


def seed_design(criterion: dict[str, Any], level: float) -> sequential.Design:
    """The sequential design a claim runs with when it is decided at ``level``: its seed plan's
    looks, or where it gives none, the design whose every look can stop at ``level``; its error
    allocated over the looks so that each can stop (refused, naming the looks, where one can't)."""

    s = criterion["seeds"]
    skew = 1.0 if criterion.get("symmetric") else sequential.SKEW
    if s.get("cap") is None:
        return sequential.Design.for_level(level, cap=MOST_SEEDS_AUTO, skew=skew)
    design = sequential.Design(
        alpha=level, pilot=s["pilot"], batch=s["batch"], cap=s["cap"], skew=skew
    )
    problems = design.problems()
    if problems:
        raise ConfigError(
            f"finding.seeds {s}: at the level the claim is decided at ({level:.3g}) "
            + "; ".join(problems)
            + "; leave finding.seeds out for the design that can stop at every look"
        )
    return design


MOST_SEEDS_AUTO = 14
"""The seed cap of the design made for a family's level when a claim gives no seed plan."""


def at_level(design: sequential.Design, level: float) -> sequential.Design:
    """``design`` with the same looks and the same shares of its error, at overall ``level``."""

    if level == design.alpha:
        return design
    spend = tuple(s * level / design.alpha for s in design.spend)
    return replace(design, alpha=level, spend=spend)


DECIDED = ("reproduced", "contradicted")
MARGIN = ("equal", "not_smaller")


def judge(
    d: np.ndarray, criterion: dict[str, Any], design: sequential.Design, level: float | None = None
) -> dict[str, Any]:
    """The claim decided from ``d`` ``[n]`` (per-seed differences arm − other, in seed order) by
    the sequential test of ``design`` with its error scaled to ``level`` (default its alpha),
    replayed over the looks the seeds reach: the decision and the repeated confidence interval of
    the look it stops at (valid however the looks went; a separation is an interval that excludes
    0), the verdict with its rule, the sequential p-value (the smallest level at which the looks
    seen would have separated the arms) and whether the claim is decided (``final``: a separation,
    a margin claim whose interval settles it, or the last look)."""

    design = at_level(design, design.alpha if level is None else level)
    test = sequential.SequentialTest(["arm", "other"], design)
    d = np.asarray(d, dtype=float)
    zeros = np.zeros_like(d)
    looked = 0
    expect, delta = criterion["expect"], criterion["smallest_effect"]
    while not test.finished and test.next_seeds <= len(d):
        n = test.next_seeds
        test.update({"arm": d[:n], "other": zeros[:n]})
        looked = n
        low, high = test.interval()
        if expect in MARGIN and claim_verdict(expect, low, high, delta)[0] in DECIDED:
            break
    if not looked:
        raise ValueError(f"{len(d)} seeds: the first look needs {design.interims[0]}")
    low, high = test.interval()
    verdict, rule = claim_verdict(expect, low, high, delta)
    return {
        "decision": test.decisions[("arm", "other")],
        "seeds": looked,
        "low": float(low),
        "high": float(high),
        # the mean of the seeds used: biased away from 0 where the test stopped early, which the
        # interval allows for and the estimate does not
        "estimate": float(test.mean()),
        "p": float(test.p_value()),
        "level": design.alpha,
        "verdict": verdict,
        "rule": rule,
        "final": test.finished or looked == design.cap or (verdict in DECIDED and expect in MARGIN),
    }


def _verdict(f, axis, values, looks, ledger, budget, seconds, design) -> dict[str, Any]:
    m = f.finding
    seeds = looks[-1]["seeds"]
    ya = np.stack([values[m.arm][s] for s in range(seeds)])
    yb = np.stack([values[m.than][s] for s in range(seeds)])
    d = ya.mean(1) - yb.mean(1)
    # the population of instances as well as seeds: the two-way paired interval, beside the
    # decision's (which holds the evaluation set fixed)
    pd_ = paired.paired_difference(ya, yb, confidence=1 - m.alpha)
    sd = float(np.std(d, ddof=1)) if seeds > 1 else float("nan")
    # alone: the same looks with the claim's whole alpha
    decided = judge(d, m.criterion(), design, m.alpha)
    return {
        "axis": axis,
        "budget": budget,
        "design": design_record(design),
        "level": m.alpha,
        "verdict": decided["verdict"],
        "rule": decided["rule"],
        "decision": decided["decision"],
        "interval": {k: decided[k] for k in ("estimate", "low", "high", "p", "seeds")},
        "effect": pd_.as_dict(),
        "instances": int(ya.shape[1]),
        "sequential_mde": detectable(m.expect, design, sd, m.smallest_effect),
        "seeds": seeds,
        "looks": looks,
        "spent": {k: ledger.counters.get(k, 0.0) for k in budget},
        "limit": dict(ledger.budget.limits),
        "per_seed": {
            a: [float(values[a][s].mean()) for s in range(seeds)] for a in (m.arm, m.than)
        },
        "seconds": seconds,
    }


def design_record(design: sequential.Design) -> dict[str, Any]:
    """What re-makes a design: its looks, its error and how it is shared over them."""

    return {
        "alpha": design.alpha,
        "pilot": design.pilot,
        "batch": design.batch,
        "cap": design.cap,
        "spend": list(design.spend),
        "skew": design.skew,
        "looks": design.interims,
    }


def design_of(record: dict[str, Any]) -> sequential.Design:
    r = {k: v for k, v in record.items() if k != "looks"}
    return sequential.Design(**{**r, "spend": tuple(r["spend"])})


def detectable(expect: str, design, sd: float, delta: float) -> dict[str, Any]:
    """What the procedure that decides could see, for the fixed evaluation set: for a
    directional claim, the effect it declares with 80% power under its looks (simulated) at the
    measured per-seed sd; for an equal / no-worse claim, the power of its margin rule at a true
    difference of 0."""

    if not np.isfinite(sd):
        return {"kind": "none"}
    if expect in MARGIN:
        margin = min(delta / sd, 1e6) if sd > 0 else 1e6
        kind = "equivalence" if expect == "equal" else "not smaller"
        return {
            "kind": "margin power at 0",
            "value": sequential.margin_power(design, margin, kind=kind),
        }
    return {"kind": "effect at 80% power", "value": sequential.sequential_mde(design) * sd}


def start_scores(out: Path, f: Finding, seeds: int) -> dict[str, Any]:
    """Each arm's held-out score at the start (the warm start's, step 0) and at the end, averaged
    over seeds, for a ``final_score`` claim; and the flags: no arm moved off the warm start (each
    arm's per-seed change has a 95% t interval containing 0), an arm that ends below it (its
    interval lies below 0)."""

    m = f.finding
    if m.metric != "final_score":
        return {"flags": []}
    con = connect(out, read_only=True)
    try:
        rows = con.execute(
            "SELECT r.arm, r.seed, e.step, e.score FROM evals e JOIN runs r USING (run_id) "
            "WHERE e.split = 'test' AND r.status = 'finished' AND r.seed < ? ORDER BY e.step",
            [seeds],
        ).fetchall()
    finally:
        con.close()
    first: dict[tuple[str, int], float] = {}
    last: dict[tuple[str, int], float] = {}
    for arm, seed, _, score in rows:
        first.setdefault((arm, seed), score)
        last[(arm, seed)] = score
    out_: dict[str, Any] = {"arms": {}, "flags": []}
    moved = []
    for arm in (m.arm, m.than):
        keys = [(arm, s) for s in range(seeds) if (arm, s) in first]
        if not keys:
            continue
        change = np.array([last[k] - first[k] for k in keys])
        lo, hi = _t_interval(change)
        out_["arms"][arm] = {
            "start": float(np.mean([first[k] for k in keys])),
            "end": float(np.mean([last[k] for k in keys])),
            "change_low": lo,
            "change_high": hi,
        }
        moved.append(not (lo <= 0 <= hi))
        if hi < 0:
            out_["flags"].append(f"{arm} ends below its warm start ({lo:+.3f} to {hi:+.3f})")
    if moved and not any(moved):
        out_["flags"].append("no arm moved off the warm start")
    return out_


def _t_interval(x: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    from scipy import stats

    if len(x) < 2:
        return float("-inf"), float("inf")
    se = float(np.std(x, ddof=1) / np.sqrt(len(x)))
    half = float(stats.t.ppf(0.5 + confidence / 2, len(x) - 1)) * se
    return float(x.mean() - half), float(x.mean() + half)


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
    extra = undeclared_differences(cfg, m.arm, m.than, m.about)
    if extra:
        raise ConfigError(
            f"{path}: arms '{m.arm}' and '{m.than}' differ beyond what the claim is about "
            f"({', '.join(m.about)}): " + "; ".join(extra)
        )
    return f, cfg


def comparisons(f: Finding) -> int:
    """How many comparisons a claim adds to its family: one per budget axis."""

    return len(f.finding.budgets or {"budget": None})


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
    m = f.finding
    claim_dir = out / f.name
    first = claim_dir / "criterion.json"
    recorded = json.loads(first.read_text()) if first.is_file() else None
    check_criterion(f, recorded, str(first))
    versions = m.criterion_versions()
    if recorded is None:
        # the first launch: the criterion is fixed before any of the claim's data exists
        claim_dir.mkdir(parents=True, exist_ok=True)
        first.write_text(
            json.dumps(
                {
                    "hash": criterion_hash(versions[-1]),
                    "criterion": versions[-1],
                    "at": time.time(),
                },
                indent=2,
            )
        )
        recorded = json.loads(first.read_text())
    level = m.alpha / family
    budgets = m.budgets or {"budget": dict(f.experiment.get("budget") or {})}
    axes = [run_axis(f, axis, dict(b), claim_dir / axis, log, level) for axis, b in budgets.items()]
    record = {
        "name": f.name,
        "path": str(path),
        "claim": m.claim,
        "source": m.source,
        "about": m.about,
        "arm": m.arm,
        "than": m.than,
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
    for ax in axes:
        ax["metric"] = m.metric
        # the verdict under every earlier version of the criterion, from the same seeds
        ax["under_amendments"] = [_under(versions[i], ax, family) for i in range(len(m.amendments))]
    claim_dir.mkdir(parents=True, exist_ok=True)
    (claim_dir / "verdict.json").write_text(json.dumps(record, indent=2, default=float))
    return record


def _under(criterion: dict[str, Any], ax: dict[str, Any], family: int) -> dict[str, Any]:
    arm, than = criterion["arm"], criterion["than"]
    if criterion["metric"] != ax.get("metric", criterion["metric"]):
        return {
            "hash": criterion_hash(criterion),
            "verdict": "not computable",
            "why": f"the runs measured {ax['metric']}, not {criterion['metric']}",
        }
    if arm not in ax["per_seed"] or than not in ax["per_seed"]:
        return {
            "hash": criterion_hash(criterion),
            "verdict": "not computable",
            "why": f"the runs measured other arms than {arm} and {than}",
        }
    d = np.subtract(ax["per_seed"][arm], ax["per_seed"][than])
    try:
        if criterion["seeds"].get("cap") is None:
            design = design_of(ax["design"])
        else:
            design = seed_design(criterion, criterion["alpha"] / family)
        decided = judge(d[: design.cap], criterion, design, criterion["alpha"])
    except (ValueError, ConfigError) as exc:  # a seed plan the seeds run cannot replay
        return {"hash": criterion_hash(criterion), "verdict": "not computable", "why": str(exc)}
    return {
        "hash": criterion_hash(criterion),
        "expect": criterion["expect"],
        "verdict": decided["verdict"],
        "rule": decided["rule"],
        "low": decided["low"],
        "high": decided["high"],
    }


ADJUSTMENTS = ("holm", "bh")


def adjusted_p(p: list[float], method: str = "holm") -> list[float]:
    """Family-adjusted p-values of ``p`` (the same order): Holm's step-down (family-wise error)
    or Benjamini-Hochberg's step-up (false discovery rate), each capped at 1."""

    if method not in ADJUSTMENTS:
        raise ValueError(f"unknown adjustment '{method}' (valid: {', '.join(ADJUSTMENTS)})")
    p_ = np.asarray(p, dtype=float)
    m = len(p_)
    order = np.argsort(p_, kind="stable")
    out = np.empty(m)
    if method == "holm":
        running = 0.0
        for rank, i in enumerate(order):
            running = max(running, (m - rank) * p_[i])
            out[i] = min(1.0, running)
    else:
        running = 1.0
        for rank in range(m - 1, -1, -1):
            i = order[rank]
            running = min(running, m * p_[i] / (rank + 1))
            out[i] = min(1.0, running)
    return out.tolist()


def adjust(records: list[dict[str, Any]], method: str = "holm") -> list[dict[str, Any]]:
    """The family's verdicts: every comparison's sequential p-value adjusted across all of them
    (``method``), and each claim judged again at the level its adjusted decision was made at
    (alpha x p / adjusted p: there the replayed interval excludes 0 exactly when the adjusted p is
    at most alpha), so the adjusted verdict and its interval come from one procedure. Writes each
    axis's ``family`` block in place and returns ``records``."""

    axes = [(r, ax) for r in records for ax in r["axes"]]
    p = [_family_p(r, ax) for r, ax in axes]
    adj = adjusted_p(p, method)
    for (r, ax), pi, ai in zip(axes, p, adj):
        # where the adjusted p is at most alpha, the level is at least p: the replay separates
        # (or settles the margin); where it is above, the level is below p: it does not
        level = min(r["alpha"], r["alpha"] * pi / ai) if ai > 0 else r["alpha"]
        d = np.subtract(ax["per_seed"][r["arm"]], ax["per_seed"][r["than"]])
        decided = judge(d, r["criterion"], design_of(ax["design"]), level)
        ax["family"] = {
            "method": method,
            "size": len(axes),
            "p": pi,
            "adjusted_p": ai,
            "level": level,
            "verdict": decided["verdict"],
            "rule": decided["rule"],
            "low": decided["low"],
            "high": decided["high"],
        }
    return records


def _family_p(r: dict[str, Any], ax: dict[str, Any]) -> float:
    """The p-value a comparison enters the family with: of separating the arms (directional and
    calibration claims), or of the margin rule (the smallest level whose interval settles an equal
    / no-worse claim as reproduced), each from the replayed sequential test."""

    d = np.subtract(ax["per_seed"][r["arm"]], ax["per_seed"][r["than"]])
    c, design = r["criterion"], design_of(ax["design"])
    if c["expect"] not in MARGIN:
        return judge(d, c, design)["p"]
    lo, hi = 1e-6, 0.999
    if judge(d, c, design, hi)["verdict"] != "reproduced":
        return 1.0
    for _ in range(30):  # bisection on the level: a wider interval settles less
        mid = (lo * hi) ** 0.5
        lo, hi = (lo, mid) if judge(d, c, design, mid)["verdict"] == "reproduced" else (mid, hi)
    return hi


def shared_runs(paths: list[Path]) -> list[list[str]]:
    """Groups of arms of different claims that run the same configuration on the same budget and
    seeds (``"claim (axis): arm"`` each), so the report can say which claims share a control: the
    same runs, so their verdicts are not independent."""

    seen: dict[str, list[str]] = {}
    for path in paths:
        f, cfg = checked_finding(path)
        base = {k: v for k, v in f.experiment.items() if k not in ("arms", "name", "seeds")}
        axes = f.finding.budgets or {"budget": base.get("budget") or {}}
        for axis, budget in axes.items():
            for arm in (f.finding.arm, f.finding.than):
                key = criterion_hash(
                    {"settings": arm_settings(cfg, arm), **base, "budget": dict(budget)}
                )
                seen.setdefault(key, []).append(f"{f.name} ({axis}): {arm}")
    return sorted(
        (v for v in seen.values() if len({x.split(" ")[0] for x in v}) > 1), key=lambda v: v[0]
    )


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
