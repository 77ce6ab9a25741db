"""A run's ledger events on disk, append-only: ``runs/<id>/ledger.jsonl``.

The trainer's :class:`~sixblanks.budgets.ledger.Ledger` hands every event to a :class:`LedgerLog`
(its ``sink``), which appends it as one JSON line. Nothing is ever rewritten. A run resumed from a
checkpoint redoes the events after it, so the runner first appends a ``resume`` record naming the
checkpoint's event number: the events numbered from there on before it are superseded.
:func:`effective_events` applies those records; :func:`replay` recomputes the counters from the
events alone, a second method that must agree with the ledger's own (the chaos tests compare
them). A line torn by a kill is skipped, and the next writer starts on a fresh line.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any


class LedgerLog:
    """Appends ledger events to ``path`` (flushed per event: a SIGKILL loses none written)."""

    def __init__(self, path: str | Path):
        from ..layout import writes

        self.path = Path(path)
        if not writes(self.path):  # a data-parallel run's other ranks: rank 0 writes the log
            self.f = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - closed by close()
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        torn = (
            self.path.exists() and self.path.stat().st_size > 0 and not _ends_in_newline(self.path)
        )
        self.f = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()
        if torn:  # a line cut short by a kill: it stays, unread; the next one starts cleanly
            self.f.write("\n")

    def __call__(self, event: dict[str, Any]) -> None:
        self.f.write(json.dumps(event, default=_plain) + "\n")
        self.f.flush()

    def resume(self, seq: int, step: int, **why: Any) -> None:
        """The events numbered ``seq`` and on, written before this record, are superseded (the run
        resumed from a checkpoint taken after event ``seq - 1``; 0: it started again)."""

        self({"type": "resume", "seq": int(seq), "step": int(step), **why})

    def close(self) -> None:
        self.f.close()


def _plain(x: Any) -> Any:
    return float(x) if hasattr(x, "__float__") else str(x)


def _ends_in_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, 2)
        return f.read(1) == b"\n"


def read_events(path: str | Path) -> list[dict[str, Any]]:
    """Every record of the file, in order (torn lines skipped)."""

    path = Path(path)
    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line a kill cut short
    return out


def effective_events(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ledger events that stand: each ``resume`` record drops the events numbered from its
    ``seq`` on that came before it."""

    out: list[dict[str, Any]] = []
    for rec in records:
        if rec.get("type") == "resume":
            out = [e for e in out if e["seq"] < rec["seq"]]
        else:
            out.append(rec)
    return out


def replay(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The counters and discards that ``events`` add up to, recomputed from the events alone:
    {"counters": {...}, "discarded_by_reason": {...}, "discarded_rollouts_by_reason": {...}}."""

    counters: dict[str, float] = {}
    by_reason: dict[str, float] = {}
    rollouts_by_reason: dict[str, float] = {}
    for e in events:
        if e["type"] in ("commit", "add"):
            for k, v in e["amounts"].items():
                counters[k] = counters.get(k, 0.0) + v
        elif e["type"] == "discard":
            counters["discarded_tokens"] = counters.get("discarded_tokens", 0.0) + e["tokens"]
            by_reason[e["reason"]] = by_reason.get(e["reason"], 0.0) + e["tokens"]
            rollouts_by_reason[e["reason"]] = (
                rollouts_by_reason.get(e["reason"], 0.0) + e["rollouts"]
            )
    return {
        "counters": counters,
        "discarded_by_reason": by_reason,
        "discarded_rollouts_by_reason": rollouts_by_reason,
    }


def compare(replayed: dict[str, float], counters: dict[str, float], rel: float = 1e-9) -> list[str]:
    """The counters where ``replayed`` (from :func:`replay`) and the ledger's ``counters``
    differ."""

    out = []
    for k in sorted(set(replayed) | set(counters)):
        a, b = replayed.get(k, 0.0), counters.get(k, 0.0)
        if not math.isclose(a, b, rel_tol=rel, abs_tol=1e-6):
            out.append(f"{k}: events add up to {a:g}, the ledger says {b:g}")
    return out
