"""The findings report: one row per claim and budget axis with its verdict, the effect and its
interval, the seeds used, the budget spent, the smallest effect the experiment could have
detected, and a figure of each seed's paired values. Built from ``OUT/<claim>/verdict.json`` only
(written by ``sixblanks findings``): ``OUT/index.html`` (self-contained), ``OUT/findings.md``, and
the table alone for README (``table_markdown``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import render
from .tables import fmt

VERDICT_CLASS = {"reproduced": "", "contradicted": "flag", "inconclusive": "inert"}


def load_verdicts(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(Path(out).glob("*/verdict.json"))]


def _effect(ax: dict[str, Any]) -> str:
    e = ax["effect"]
    return f"{fmt(e['diff'])} [{fmt(e['low'])}, {fmt(e['high'])}]"


def _spent(ax: dict[str, Any]) -> str:
    return ", ".join(f"{v:g} of {ax['limit'].get(k, 0):g} {k}" for k, v in ax["spent"].items())


def _detectable(ax: dict[str, Any]) -> str:
    mde = ax["effect"]["mde"]
    seq = ax.get("sequential_mde")
    text = fmt(mde)
    if seq is not None and seq == seq:
        text += f" (sequential design: {fmt(seq)})"
    return text


def _expected(r: dict[str, Any]) -> str:
    delta = f"{r['smallest_effect']:g}"
    return {
        "equal": f"within ±{delta}",
        "not_smaller": f"not smaller by more than {delta}",
        "no_difference": "not separated",
    }.get(r["expect"], r["expect"])


def rows(verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in verdicts:
        for ax in r["axes"]:
            out.append(
                {
                    "claim": r["name"],
                    "statement": r["claim"],
                    "source": r["source"],
                    "compared": f"{r['arm']} vs {r['than']} ({r['metric']}, expected "
                    + _expected(r)
                    + ")",
                    "axis": ", ".join(f"{k} {v:g}" for k, v in ax["budget"].items()),
                    "verdict": ax["verdict"],
                    "effect": _effect(ax),
                    "seeds": str(ax["seeds"]),
                    "spent": _spent(ax),
                    "detectable": _detectable(ax),
                    "meaning": r.get("meaning", ""),
                    "audit": "; ".join(ax.get("audit", [])) or "none",
                }
            )
    return out


HEADER = [
    "claim",
    "arms (metric, expected)",
    "matched on",
    "verdict",
    "effect, arm − other [95% CI]",
    "seeds per arm",
    "smallest detectable effect (80% power)",
]


def table_markdown(verdicts: list[dict[str, Any]]) -> str:
    """The verdicts as one Markdown table (README's Findings section)."""

    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for r in rows(verdicts):
        cells = [
            r["claim"],
            r["compared"],
            r["axis"],
            f"**{r['verdict']}**",
            r["effect"],
            r["seeds"],
            r["detectable"],
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    notes = [
        f"- **{r['name']}**: {r['claim']} ({r['source']}). {r.get('meaning', '')}".rstrip()
        for r in verdicts
    ]
    return "\n".join(lines + [""] + notes)


def figure(r: dict[str, Any]) -> bytes | None:
    """Each seed's value of the two arms (joined per seed), one panel per budget axis."""

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plots import fig_png

    axes_data = r["axes"]
    if not axes_data:
        return None
    fig, axs = plt.subplots(
        1, len(axes_data), figsize=(3.2 * len(axes_data) + 0.6, 2.6), squeeze=False
    )
    for ax, a in zip(axs[0], axes_data):
        ya, yb = a["per_seed"][r["arm"]], a["per_seed"][r["than"]]
        for u, v in zip(yb, ya):
            ax.plot([0, 1], [u, v], color="#999", lw=0.8, marker="o", ms=3)
        ax.set_xticks([0, 1], [r["than"], r["arm"]])
        ax.set_xlim(-0.4, 1.4)
        ax.set_title(f"{a['verdict']} ({', '.join(a['budget'])})", fontsize=9)
        ax.set_ylabel(r["metric"], fontsize=8)
    fig.tight_layout()
    return fig_png(fig)


def build_findings_report(out: str | Path) -> Path:
    """``OUT/index.html`` and ``OUT/findings.md`` from every verdict under ``out``."""

    out = Path(out)
    verdicts = load_verdicts(out)
    table = render.Table(
        HEADER[:4]
        + [
            "effect, arm − other [95% CI]",
            "seeds per arm",
            "budget spent",
            HEADER[-1],
            "fairness audit flags",
        ],
        [
            [
                render.Cell(r["claim"], note=r["statement"]),
                r["compared"],
                r["axis"],
                render.Cell(r["verdict"], VERDICT_CLASS.get(r["verdict"], "")),
                r["effect"],
                r["seeds"],
                r["spent"],
                r["detectable"],
                render.Cell(r["audit"], "" if r["audit"] == "none" else "flag"),
            ]
            for r in rows(verdicts)
        ],
    )
    blocks: list[render.Block] = [
        render.Para(
            "Each claim ran as an experiment of two arms that differ only in the blanks the claim "
            "is about, matched on the budget shown. Seeds were added in batches until the arms "
            "separated or the cap was reached, under a group-sequential randomization test that "
            "holds the error of declaring a difference at the claim's alpha (5% unless it says "
            "otherwise) over all looks. 'reproduced': separated in the claimed direction; for a "
            "claim of no difference, the interval lies within ± the smallest effect that matters; "
            "for a 'no worse' claim, above minus it. 'contradicted': separated the other way, or "
            "the interval lies beyond the smallest effect. 'inconclusive': neither, and the "
            "smallest detectable effect says how large a difference the seeds used could have "
            "seen.",
            "caption",
        ),
        table,
    ]
    for r in verdicts:
        blocks += [
            render.Heading(r["name"], 3),
            render.Para(f"{r['claim']} Source: {r['source']}."),
        ]
        if r.get("meaning"):
            blocks.append(render.Para(r["meaning"], "caption"))
        png = figure(r)
        if png:
            name = f"{r['name']}.png"
            (out / name).write_bytes(png)
            blocks.append(render.Image(name, r["name"], png))
    if not verdicts:
        blocks.append(render.Para("No finding has run yet.", "flag"))
    title = "sixblanks findings"
    (out / "index.html").write_text(render.to_html(title, blocks), encoding="utf-8")
    (out / "findings.md").write_text(render.to_markdown(title, blocks), encoding="utf-8")
    return out / "index.html"


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
