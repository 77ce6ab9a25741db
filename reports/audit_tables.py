"""The report's blanks table (differences highlighted, inert notes beside them) and the fairness
audit as an item x arm table. Each ``*_blocks`` function returns render blocks (see render.py)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import polars as pl

from .render import Block, Cell, Heading, Para, Table

if TYPE_CHECKING:
    from .data import Data


def flat_blanks(d: Data) -> tuple[list[str], dict[str, dict[str, Any]], set[str]]:
    def flatten(prefix, v, out):
        if isinstance(v, dict):
            for k, x in v.items():
                flatten(f"{prefix}.{k}" if prefix else k, x, out)
        else:
            out[prefix] = v

    first = dict(
        d.runs.group_by("arm", maintain_order=True).agg(pl.col("blanks").first()).iter_rows()
    )
    cols: dict[str, dict[str, Any]] = {}
    for arm in d.arms:
        out: dict[str, Any] = {}
        flatten("", json.loads(first[arm] or "{}"), out)
        cols[arm] = out
    keys = list(dict.fromkeys(k for c in cols.values() for k in c))
    differing = {k for k in keys if len({json.dumps(c.get(k)) for c in cols.values()}) > 1}
    return keys, cols, differing


def inert_notes(d: Data, field: str) -> dict[str, list[str]]:
    """{arm: notes} of the inert rows that apply to ``field``: their blank is the field's path or
    a prefix of it (``data.dynamic_sampling`` covers ``data.dynamic_sampling.enabled``)."""

    out: dict[str, list[str]] = {}
    for arm, blank, note in d.inert.select("arm", "blank", "note").iter_rows():
        if blank and (field == blank or field.startswith(blank + ".")):
            out.setdefault(arm, []).append(str(note))
    return out


def blanks_blocks(d: Data) -> list[Block]:
    keys, cols, differing = flat_blanks(d)
    rows, row_cls, used = [], [], set()
    for k in keys:
        notes = inert_notes(d, k) if k in differing else {}
        cells: list[Cell | str] = [Cell(k, mark="≠" if k in differing else "")]
        for arm, c in cols.items():
            n = notes.get(arm)
            cells.append(
                Cell(json.dumps(c.get(k)), "inert", "inert: " + "; ".join(n))
                if n
                else json.dumps(c.get(k))
            )
            used |= {(arm, note) for note in n or []}
        rows.append(cells)
        row_cls.append("diff" if k in differing else "")
    blocks: list[Block] = [
        Heading("The six blanks"),
        Para(
            "Rows that differ between arms are highlighted (≠ in Markdown); a differing field that "
            "never acted in an arm's runs carries that arm's inert note.",
            "caption",
        ),
        Table(["field", *cols], rows, row_cls),
    ]
    rest = [
        f"{arm}: {blank}: {note}"
        for arm, blank, note in d.inert.select("arm", "blank", "note").iter_rows()
        if (arm, str(note)) not in used
    ]
    if rest:
        blocks.append(
            Para("Other inert notes (on fields equal across arms): " + "; ".join(rest), "caption")
        )
    return blocks


def compact(v: Any) -> str:
    """A held-constant value in one short line: scalars as they are (hash prefixes stay whole),
    mappings as key=value lists (nested keys joined with dots), lists in brackets."""

    if v is None:
        return "—"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, dict):
        if not v:
            return "{}"
        flat: dict[str, Any] = {}

        def walk(prefix: str, x: Any) -> None:
            if isinstance(x, dict) and x:
                for k, y in x.items():
                    walk(f"{prefix}.{k}" if prefix else str(k), y)
            else:
                flat[prefix] = x

        walk("", v)
        return ", ".join(f"{k}={compact(x)}" for k, x in flat.items())
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(compact(x) for x in v) + "]"
    return str(v)


def _parse(s: str | None) -> Any:
    if s is None:
        return None
    try:
        return json.loads(s)
    except ValueError:
        return s


def fairness_blocks(d: Data) -> list[Block]:
    """One column per arm, one row per held-constant item (whatever items the store holds); a
    flagged cell is highlighted with its reason beside it. Per-run flags (consumption, code) come
    after."""

    f = d.fairness
    per_arm = f.filter(pl.col("run_id").is_null())
    per_run = f.filter(pl.col("run_id").is_not_null() & pl.col("flagged"))
    arms = [a for a in d.arms if a in set(per_arm["arm"].to_list())]
    arms += [a for a in dict.fromkeys(per_arm["arm"].to_list()) if a not in arms]
    blocks: list[Block] = [Heading("Fairness audit")]
    if per_arm.height:
        rows, row_cls = _held_constant_rows(per_arm, arms)
        blocks += [
            Para(
                "What must be held constant across arms, the value of each arm in its cell. A "
                "flagged cell (⚠ in Markdown) differs from the experiment's value (last column), "
                "its reason beside it; rows whose values differ at all are highlighted.",
                "caption",
            ),
            Table(["item", *arms, "experiment's value (where flagged)"], rows, row_cls),
        ]
    if per_run.height:
        blocks.append(Para("Flags of single runs (consumption, code):", "caption"))
        blocks.append(_run_flags_table(per_run))
    if not f.filter(pl.col("flagged")).height:
        blocks.append(
            Para(
                "No arm differs on a held-constant item; every run consumed at least 90% of the "
                "matched budget."
            )
        )
    return blocks


def _held_constant_rows(
    per_arm: pl.DataFrame, arms: list[str]
) -> tuple[list[list[Cell | str]], list[str]]:
    """The held-constant table's rows (the item, each arm's value, flagged ones with their reason,
    then the experiment's value where flagged) and each row's class ("diff" where values differ)."""

    cell = {
        (a, i): (fl, r, v, ref)
        for a, i, fl, r, v, ref in per_arm.select(
            "arm", "item", "flagged", "reason", "value", "reference"
        ).iter_rows()
    }
    rows, row_cls = [], []
    for item in dict.fromkeys(per_arm["item"].to_list()):
        cells: list[Cell | str] = [item]
        values, refs = set(), []
        for a in arms:
            fl, reason, value, ref = cell.get((a, item), (False, None, None, None))
            values.add(json.dumps(_parse(value), sort_keys=True))
            text = compact(_parse(value)) if (a, item) in cell else "(not audited)"
            cells.append(Cell(text, "flag", str(reason or "flagged"), "⚠") if fl else Cell(text))
            if fl and ref is not None:
                refs.append(compact(_parse(ref)))
        cells.append(", ".join(dict.fromkeys(refs)) if refs else "")
        rows.append(cells)
        row_cls.append("diff" if len(values) > 1 else "")
    return rows, row_cls


def _run_flags_table(per_run: pl.DataFrame) -> Table:
    """The flags of single runs (consumption, code): arm, item, run and the flagged reason."""

    return Table(
        ["arm", "item", "run", "reason"],
        [
            [a, i, str(rid), Cell(str(r), "flag", mark="⚠")]
            for a, i, r, rid in per_run.select("arm", "item", "reason", "run_id").iter_rows()
        ],
    )
