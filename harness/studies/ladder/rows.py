"""What a rung gives: rows, one per setting it tried, then exactly one verdict row
(``variant == "verdict"``: pass, fail or inconclusive with a short reason). Every row carries its
rung's number and name from the constant of that rung below, the one place they are written; the
registry lists these constants in order with their functions.

This module imports nothing heavy: ``sixblanks recommend`` names rungs through the registry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

SPLIT = "validation"
"""The held-out split every ladder evaluation scores: selection never sees the test instances."""
VERDICT = "verdict"
"""The ``variant`` of a rung's one verdict row."""


@dataclass
class RungResult:
    rung: int
    rung_name: str
    variant: str  # a setting, or VERDICT for the rung's one verdict row
    status: str  # pass / fail / inconclusive
    evidence: str
    ci_low: float | None = None
    ci_high: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)


class RungId(NamedTuple):
    """A rung's number and name, as its rows carry them."""

    number: int
    name: str

    def row(
        self,
        variant: str,
        status: str,
        evidence: str,
        ci: tuple[float | None, float | None] = (None, None),
        detail: dict[str, Any] | None = None,
    ) -> RungResult:
        """A row of this rung for one setting (``variant``)."""

        lo, hi = ci
        detail = {} if detail is None else detail
        return RungResult(self.number, self.name, variant, status, evidence, lo, hi, detail)

    def verdict(
        self, status: str, reason: str, ci: tuple[float, float] | None = None, **detail: Any
    ) -> RungResult:
        """The verdict row of this rung."""

        return self.row(VERDICT, status, reason, ci or (None, None), detail)


CONTRACT = RungId(1, "contract")
FROZEN_BATCH = RungId(2, "frozen_batch")
NO_UPDATE_EVAL = RungId(3, "no_update_eval")
CURRICULUM = RungId(4, "curriculum")
ADVANTAGE = RungId(5, "advantage")
NORMALIZATION = RungId(6, "normalization")
CLIP_KL_LR = RungId(7, "clip_kl_lr")
CREDIT = RungId(8, "credit")
ASYNCHRONY = RungId(9, "asynchrony")


def engine_name(engine) -> str:
    """The engine class that sampled a rung's rollouts (HFEngine, VLLMEngine), for its evidence."""

    return type(engine).__name__


def verdicts(results: list[RungResult]) -> list[RungResult]:
    return [r for r in results if r.variant == VERDICT]


def first_failure(results: list[RungResult]) -> RungResult | None:
    """The verdict row of the first failing rung, or None."""

    return next((r for r in verdicts(results) if r.status == "fail"), None)
