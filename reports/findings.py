"""The findings report: one row per claim and budget axis with its verdict, the effect and its
interval, the seeds used, the budget spent, the smallest effect the experiment could have
detected, and a figure of each seed's paired values. Built from ``OUT/<claim>/verdict.json`` only
(written by ``sixblanks findings``): ``OUT/index.html`` (self-contained), ``OUT/findings.md``, and
the table alone for README (``table_markdown``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from . import render
from .tables import fmt

VERDICT_CLASS = {
    "reproduced": "",
    "present but smaller than claimed": "inert",
    "not reproduced at delta": "flag",
    "contradicted": "flag",
    "inconclusive": "inert",
}


def load_verdicts(out: Path, names: list[str] | None = None) -> list[dict[str, Any]]:
    """The verdicts under ``out`` (``<claim>/verdict.json``), those of ``names`` only if given."""

    found = [json.loads(p.read_text()) for p in sorted(Path(out).glob("*/verdict.json"))]
    return [r for r in found if names is None or r["name"] in names]


def load_summaries(folder: str | Path) -> list[dict[str, Any]]:
    """The committed summaries (``<claim>.json``) of ``folder``, by claim name."""

    return [json.loads(p.read_text()) for p in sorted(Path(folder).glob("*.json"))]


def _interval(ax: dict[str, Any]) -> str:
    if "comparisons" in ax:  # a claim of several comparisons: each with its own
        return "; ".join(f"{c['label']}: {_interval(c)}" for c in ax["comparisons"])
    fam = ax.get("family") or {}
    interval = ax["interval"]
    low, high = fam.get("low", interval["low"]), fam.get("high", interval["high"])
    return f"{fmt(interval['estimate'])} [{fmt(low)}, {fmt(high)}]"


def _spent(ax: dict[str, Any]) -> str:
    return ", ".join(f"{v:g} of {ax['limit'].get(k, 0):g} {k}" for k, v in ax["spent"].items())


def _detectable(ax: dict[str, Any]) -> str:
    d = ax.get("sequential_mde") or {}
    if d.get("kind") == "effect at 80% power":
        return f"{fmt(d['value'])} (80% power, this design's looks)"
    if d.get("kind") == "margin power at 0":
        return f"power {fmt(d['value'])} at a true difference of 0"
    return "n/a"


def _expected(r: dict[str, Any], ax: dict[str, Any]) -> str:
    expect, delta = ax.get("expect", r["expect"]), ax.get("smallest_effect", r["smallest_effect"])
    delta = f"{delta:g}"
    lower = (r.get("criterion") or {}).get("better") == "lower"
    side = ", lower is better" if lower else ""
    return {
        "equal": f"within ±{delta}",
        "not_smaller": f"not smaller by more than {delta}",
        "no_difference": "not separated",
        "best": f"best, by at least {delta} over each other arm{side}",
        "ordering": f"in this order, each by at least {delta}{side}",
        "grows": f"arm − than grows from {' to '.join(r.get('between') or [])} by at least {delta}",
        "changes_sign": f"arm − than changes sign from {' to '.join(r.get('between') or [])}",
    }.get(expect, f"{expect} by at least {delta}")


def _compared(r: dict[str, Any]) -> str:
    if r.get("form") == "many":
        lower = (r.get("criterion") or {}).get("better") == "lower"
        sep = (" < " if lower else " > ") if r["expect"] == "ordering" else ", "
        head = f"{r['arm']} over " if r["expect"] == "best" else ""
        others = [a for a in r["arms"] if a != r["arm"] or r["expect"] == "ordering"]
        return head + sep.join(others)
    return f"{r['arm']} vs {r['than']}"


def _verdict_text(ax: dict[str, Any]) -> str:
    fam = ax.get("family")
    if not fam:
        return ax["verdict"]
    alone = "" if fam["verdict"] == ax["verdict"] else f" (alone: {ax['verdict']})"
    return f"{fam['verdict']}{alone}"


_CONSUMED = re.compile(r"^(.+?): consumption: consumed (\S+) of (\S+) (\w+) \(")


def audit_cell(flags: list[str]) -> str:
    """The audit's and the warm start's flags of one axis as one cell: a run's consumption flags
    (one per run that spent under 90% of the matched budget) counted per arm and counter, with
    their range; every other flag as it is; "none" without any."""

    out: list[str] = []
    spent: dict[tuple[str, str, str], list[float]] = {}
    for flag in flags:
        m = _CONSUMED.match(flag)
        if m is None:
            out.append(flag)
            continue
        arm, used, limit, counter = m.groups()
        if (arm, limit, counter) not in spent:
            out.append(f"\0{len(spent)}")  # its place among the flags
        spent.setdefault((arm, limit, counter), []).append(float(used))
    for i, ((arm, limit, counter), used) in enumerate(spent.items()):
        text = (
            f"{arm}: consumption: {len(used)} run(s) consumed under 90% of the matched budget "
            f"({min(used):g} to {max(used):g} of {limit} {counter})"
        )
        out[out.index(f"\0{i}")] = text
    return "; ".join(out) or "none"


def rows(verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in verdicts:
        for ax in r["axes"]:
            fam = ax.get("family") or {}
            out.append(
                {
                    "claim": r["name"],
                    "statement": r["claim"],
                    "source": r["source"],
                    "compared": f"{_compared(r)} ({r['metric']}, expected "
                    + _expected(r, ax)
                    + ")",
                    "axis": ", ".join(f"{k} {v:g}" for k, v in ax["budget"].items()),
                    "verdict": fam.get("verdict", ax["verdict"]),
                    "verdict_text": _verdict_text(ax),
                    "rule": fam.get("rule", ax["rule"]),
                    "effect": _interval(ax),
                    "seeds": str(ax["seeds"]),
                    "spent": _spent(ax),
                    "detectable": _detectable(ax),
                    "meaning": r.get("meaning", ""),
                    "audit": audit_cell(ax.get("audit", []) + ax.get("flags", [])),
                }
            )
    return out


HEADER = [
    "claim",
    "arms (metric, expected)",
    "matched on",
    "verdict in the family",
    "effect, arm − other [adjusted interval]",
    "seeds per arm",
    "budget spent",
    "what the design could see",
    "audit and warm-start flags",
]


def table_markdown(verdicts: list[dict[str, Any]]) -> str:
    """The verdicts (committed summaries) as one Markdown table (README's Findings section), with
    the adjustment, the commit measured at, and each claim's note."""

    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for r in rows(verdicts):
        cells = [
            r["claim"],
            r["compared"],
            r["axis"],
            f"**{r['verdict_text']}**",
            r["effect"],
            r["seeds"],
            r["spent"],
            r["detectable"],
            r["audit"],
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    fams = {
        (ax["family"]["method"], ax["family"]["size"])
        for v in verdicts
        for ax in v["axes"]
        if ax.get("family")
    }
    commits = sorted({v.get("commit", "?") for v in verdicts})
    foot = []
    if verdicts:
        foot.append(
            f"Measured at commit {', '.join(commits)}; verdicts adjusted across the family ("
            + "; ".join(f"{m} over {n} comparisons" for m, n in sorted(fams))
            + "). Each interval is the repeated confidence interval of the sequential test that "
            "decides, at the level of its adjusted decision, for the fixed evaluation set."
        )
    notes = [
        f"- **{r['name']}**: {r['claim']} ({r['source']}). {r.get('meaning', '')}".rstrip()
        + "".join(
            f" Amended: was {_changes(a['was'], r['criterion'])} ({a['reason']})."
            for a in r.get("amendments", [])
        )
        for r in verdicts
    ]
    return "\n".join(lines + [""] + foot + ([""] if foot else []) + notes)


def _changes(was: dict[str, Any], now: dict[str, Any]) -> str:
    return ", ".join(f"{k} {was[k]!r} (now {now.get(k)!r})" for k in was if was[k] != now.get(k))


def figure(r: dict[str, Any]) -> bytes | None:
    """Each seed's value of the two arms (joined per seed), one panel per budget axis."""

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .curves import fig_png

    axes_data = r["axes"]
    if not axes_data:
        return None
    fig, axs = plt.subplots(
        1, len(axes_data), figsize=(3.2 * len(axes_data) + 0.6, 2.6), squeeze=False
    )
    for ax, a in zip(axs[0], axes_data):
        if "comparisons" in a:  # each implied comparison's per-seed differences, 0 marked
            for i, c in enumerate(a["comparisons"]):
                ax.plot([i] * len(c["d"]), c["d"], "o", color="#666", ms=3)
            ax.axhline(0, color="#bbb", lw=0.8)
            labels = [c["label"] for c in a["comparisons"]]
            ax.set_xticks(range(len(labels)), labels, fontsize=6, rotation=15)
            ax.set_xlim(-0.6, len(labels) - 0.4)
        else:
            ya, yb = a["per_seed"][r["arm"]], a["per_seed"][r["than"]]
            for u, v in zip(yb, ya):
                ax.plot([0, 1], [u, v], color="#999", lw=0.8, marker="o", ms=3)
            ax.set_xticks([0, 1], [r["than"], r["arm"]])
            ax.set_xlim(-0.4, 1.4)
        verdict = (a.get("family") or {}).get("verdict", a["verdict"])
        ax.set_title(f"{verdict} ({', '.join(a['budget'])})", fontsize=9)
        ax.set_ylabel(r["metric"], fontsize=8)
    fig.tight_layout()
    return fig_png(fig)


METHOD = (
    "Each claim ran as an experiment of two arms that differ only in the blanks the claim "
    "is about, matched on the budget shown. Seeds were added in batches until the claim "
    "was decided or its seed cap was reached, under a sequential sign-flip test of the "
    "mean per-seed difference whose error is split over its looks; the claims run "
    "together are one family, each stopped at its alpha divided by the family's size, "
    "and their verdicts adjusted across the family (Holm unless said otherwise). The "
    "interval is the test's repeated confidence interval at the level of the adjusted "
    "decision: valid however the looks went, for the fixed evaluation set, and the "
    "decision is read from it. A claim of a direction with smallest effect δ is "
    "'reproduced' when the interval excludes 0 on the claimed side and does not exclude "
    "δ; 'present but smaller than claimed' when it lies between 0 and δ; 'not reproduced "
    "at delta' when it excludes δ but not 0; 'contradicted' when it lies wholly on the "
    "other side of 0; 'inconclusive' when it contains both. A claim of equality is "
    "reproduced inside ±δ; a 'no worse' claim above −δ. A claim over several arms (best, "
    "or an ordering) is decided from the pairs it implies, Holm-adjusted inside the claim: "
    "reproduced only if every pair is, contradicted if any pair is, otherwise the weakest "
    "pair's verdict. An interaction claim tests, per seed, the change of arm − than "
    "between two budgets (grows), or the side of 0 it is separated on at each (changes "
    "sign). Each verdict's rule is its cell's note."
)
"""How the findings page reads a verdict: the experiment, the sequential test, the family's
adjustment, and each verdict's rule (the page's caption above the table)."""


def build_findings_report(out: str | Path, names: list[str] | None = None) -> Path:
    """``OUT/index.html`` and ``OUT/findings.md`` from the verdicts under ``out`` (those of
    ``names`` only, where given: the claims of the last findings run, one family)."""

    out = Path(out)
    verdicts = load_verdicts(out, names)
    blocks: list[render.Block] = [render.Para(METHOD, "caption"), _verdicts_table(verdicts)]
    for r in verdicts:
        blocks += _verdict_blocks(out, r)
    if not verdicts:
        blocks.append(render.Para("No finding has run yet.", "flag"))
    title = "sixblanks findings"
    (out / "index.html").write_text(render.to_html(title, blocks), encoding="utf-8")
    (out / "findings.md").write_text(render.to_markdown(title, blocks), encoding="utf-8")
    return out / "index.html"


def _verdicts_table(verdicts: list[dict[str, Any]]) -> render.Table:
    """One row per claim: what was compared on which axis, the verdict (its rule as the note), the
    effect, seeds, budget spent, the detectable effect and the audit."""

    return render.Table(
        HEADER,
        [
            [
                render.Cell(r["claim"], note=r["statement"]),
                r["compared"],
                r["axis"],
                render.Cell(r["verdict_text"], VERDICT_CLASS.get(r["verdict"], ""), note=r["rule"]),
                r["effect"],
                r["seeds"],
                r["spent"],
                r["detectable"],
                render.Cell(r["audit"], "" if r["audit"] == "none" else "flag"),
            ]
            for r in rows(verdicts)
        ],
    )


def _verdict_blocks(out: Path, r: dict[str, Any]) -> list[render.Block]:
    """One claim's section: its name, statement and source, what it means, its details, and its
    figure (written beside the page)."""

    blocks: list[render.Block] = [
        render.Heading(r["name"], 3),
        render.Para(f"{r['claim']} Source: {r['source']}."),
    ]
    if r.get("meaning"):
        blocks.append(render.Para(r["meaning"], "caption"))
    blocks += _details(r)
    png = figure(r)
    if png:
        name = f"{r['name']}.png"
        (out / name).write_bytes(png)
        blocks.append(render.Image(name, r["name"], png))
    return blocks


def _details(r: dict[str, Any]) -> list[render.Block]:
    """A claim's rules, its family adjustment, amendments, shared runs and starting scores."""

    blocks: list[render.Block] = []
    for ax in r["axes"]:
        fam = ax.get("family") or {}
        blocks += _shared_text(ax)
        if "comparisons" in ax:
            blocks += [render.Para(_combined_text(ax)), *_amended_text(ax)]
            continue
        e = ax["interval"]
        text = (
            f"{ax['axis']}: alone (level {ax['level']:.3g}): {ax['verdict']}, because "
            f"{ax['rule']} [{fmt(e['low'])}, {fmt(e['high'])}]; sequential p {e['p']:.3g}; "
            f"estimate {fmt(e['estimate'])} (median-unbiased at the stopping look"
            + (f"; mean of the seeds {fmt(e['mean'])})." if "mean" in e else ").")
        )
        if fam:
            text += (
                f" In the family ({fam['method']} over {fam['size']}): adjusted p "
                f"{fam['adjusted_p']:.3g}, {fam['verdict']}, because {fam['rule']} "
                f"[{fmt(fam['low'])}, {fmt(fam['high'])}]."
            )
        pd_ = ax.get("effect") or {}
        if pd_:
            text += (
                f" Over the population of instances as well ({ax.get('instances', '?')} distinct "
                f"instances, two-way paired interval): [{fmt(pd_['low'])}, {fmt(pd_['high'])}]."
            )
        start = (ax.get("start") or {}).get("arms") or {}
        if start:
            text += " Held-out score from the warm start to the end: " + "; ".join(
                f"{a} {fmt(v['start'])} → {fmt(v['end'])}" for a, v in start.items()
            )
            text += "."
        blocks += [render.Para(text), *_amended_text(ax)]
    for a in r.get("amendments", []):
        blocks.append(
            render.Para(
                f"Amended{' ' + a['date'] if a.get('date') else ''}: was "
                f"{_changes(a['was'], r['criterion'])}; reason: {a['reason']}",
                "flag",
            )
        )
    for group in r.get("shared_runs", []):
        blocks.append(
            render.Para("Shares its runs (the same configuration and seeds): " + ", ".join(group))
        )
    return blocks


def _combined_text(ax: dict[str, Any]) -> str:
    """A claim of several comparisons: its combined verdict and rule, then each comparison alone
    (Holm inside the claim) and in the family."""

    fam = ax.get("family") or {}
    text = f"{ax['axis']}: alone: {ax['verdict']}"
    if fam:
        text += f"; in the family ({fam['method']} over {fam['size']}): {fam['verdict']}"
    text += f". Rule: {ax['rule']}."
    for c in ax["comparisons"]:
        e, cf = c["interval"], c.get("family") or {}
        text += (
            f" {c['label']} (expected {c['expect']}): estimate {fmt(e['estimate'])} (median-"
            f"unbiased; mean of the seeds {fmt(e['mean'])}); alone at the level Holm holds it to "
            f"inside the claim ({c['level']:.3g}): {c['verdict']}, because {c['rule']} "
            f"[{fmt(e['low'])}, {fmt(e['high'])}]"
        )
        if cf:
            text += (
                f"; in the family (adjusted p {cf['adjusted_p']:.3g}): {cf['verdict']} "
                f"[{fmt(cf['low'])}, {fmt(cf['high'])}]"
            )
        text += "."
    return text


def _amended_text(ax: dict[str, Any]) -> list[render.Block]:
    """The axis's verdict under each earlier version of the criterion (each implied pair's for a
    claim of several comparisons), or why it is not computable."""

    return [
        render.Para(
            f"Under the criterion before amendment ({u.get('expect', '?')}, hash "
            f"{u['hash']}): {u['verdict']}"
            + (f", because {u['rule']}" if "rule" in u else f" ({u.get('why', '')})")
            + "".join(
                f"; {c['label']}: {c['verdict']} [{fmt(c['low'])}, {fmt(c['high'])}]"
                for c in u.get("comparisons", [])
            )
            + ".",
            "flag",
        )
        for u in ax.get("under_amendments", [])
    ]


def _shared_text(ax: dict[str, Any]) -> list[render.Block]:
    shared = ax.get("shared") or {}
    if not shared.get("runs"):
        return []
    whence = ", ".join(f"{n} from {k}" for k, n in shared["from"].items())
    spent = ", ".join(f"{v:g} {k}" for k, v in shared["consumed"].items())
    return [
        render.Para(
            f"{ax['axis']}: {shared['runs']} run(s) taken over, not trained again ({whence}): "
            f"the same configuration, seeds and code; their cost ({spent}) is in the ledger of "
            "the claim that trained them, not in this one's budget spent."
        )
    ]


README_START, README_END = "<!-- findings:start -->", "<!-- findings:end -->"


def update_readme(readme: str | Path, verdicts: list[dict[str, Any]]) -> None:
    """Replace the text between the findings markers of ``readme`` with the table."""

    p = Path(readme)
    text = p.read_text(encoding="utf-8")
    if README_START not in text or README_END not in text:
        raise ValueError(f"{p}: no '{README_START}' ... '{README_END}' block to fill")
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    p.write_text(
        f"{head}{README_START}\n{table_markdown(verdicts)}\n{README_END}{tail}", encoding="utf-8"
    )
