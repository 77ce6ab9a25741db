"""The ladder's rungs in the order it walks them: each rung's number and name (its constant in
:mod:`.rows`, which its rows carry too) and the function that runs it on a
:class:`~.context.RungContext`. Every place that shows a rung's name reads it here or from its rows.

Importing the registry loads neither torch nor numpy (``sixblanks recommend`` names rungs from
it): each rung function imports what it computes with when it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .asynchrony import asynchrony
from .checks import contract, frozen_batch, no_update_eval
from .context import RungContext
from .curriculum import curriculum
from .normalization import normalization
from .one_axis import advantage, clip_kl_lr, credit
from .rows import (
    ADVANTAGE,
    ASYNCHRONY,
    CLIP_KL_LR,
    CONTRACT,
    CREDIT,
    CURRICULUM,
    FROZEN_BATCH,
    NO_UPDATE_EVAL,
    NORMALIZATION,
    RungResult,
)


@dataclass(frozen=True)
class Rung:
    number: int
    name: str
    run: Callable[[RungContext], list[RungResult]]
    """Its rows, one per setting it tried, then its one verdict row."""


RUNGS: tuple[Rung, ...] = (
    Rung(*CONTRACT, contract),
    Rung(*FROZEN_BATCH, frozen_batch),
    Rung(*NO_UPDATE_EVAL, no_update_eval),
    Rung(*CURRICULUM, curriculum),
    Rung(*ADVANTAGE, advantage),
    Rung(*NORMALIZATION, normalization),
    Rung(*CLIP_KL_LR, clip_kl_lr),
    Rung(*CREDIT, credit),
    Rung(*ASYNCHRONY, asynchrony),
)

RUNG_NAMES: dict[int, str] = {r.number: r.name for r in RUNGS}
"""Each rung's name by its number."""

# the walk's `until` and the CLI's rung numbers count on it, as a user reading the ladder does
if [r.number for r in RUNGS] != list(range(1, len(RUNGS) + 1)):
    raise RuntimeError("the ladder's rungs are numbered 1, 2, ... in the order it walks them")
