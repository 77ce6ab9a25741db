"""One flag of the fairness audit (:class:`Flag`), as the audit builds it and as ``fairness.json``
records it (:meth:`Flag.as_dict`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_NOT_COMPARED: Any = object()
"""``value`` and ``reference`` of a flag that is not a held-constant item's difference (either of
those may itself be None)."""


@dataclass(frozen=True)
class Flag:
    """An arm flagged on an audit ``item`` for ``reason``: about one of its runs (``run_id``), or
    its value of a held-constant item against the experiment's (``value``, ``reference``)."""

    arm: str
    item: str
    reason: str
    run_id: str | None = None
    value: Any = _NOT_COMPARED
    reference: Any = _NOT_COMPARED

    def as_dict(self) -> dict[str, Any]:
        """The flag as ``fairness.json`` records it: arm, item, the run where there is one, the
        reason, and the two values where it compares them."""

        out: dict[str, Any] = {"arm": self.arm, "item": self.item}
        if self.run_id is not None:
            out["run_id"] = self.run_id
        out["reason"] = self.reason
        if self.value is not _NOT_COMPARED:
            out |= {"value": self.value, "reference": self.reference}
        return out
