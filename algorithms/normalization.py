"""The normalization blank Z: per-token loss weights over the whole optimizer-step batch.

Computing the weights once on the full batch, then summing ``weights * loss`` over
any split of the rows, makes micro-batching (gradient accumulation) exact: the
sum over micro-batches equals the full-batch loss, and so do the gradients.

``NORMALIZATIONS[mode](mask, **fields)`` gives the weights ``[B, T]`` (float64) of a mode from
the float64 mask ``[B, T]``; each mode declares the ``normalization.*`` fields it reads.
"""

from __future__ import annotations

import torch

from .registry import Registry

NORMALIZATIONS = Registry("normalization mode", inputs=("mask",))
"""normalization.mode -> its weights function."""


def _rows(mask: torch.Tensor, count_empty_rows: bool) -> float:
    """B: the rows of ``mask`` ``[B, T]``, all-masked rows included only if ``count_empty_rows`` (>= 1)."""

    B = float(mask.shape[0]) if count_empty_rows else float((mask.sum(1) > 0).sum())
    return max(B, 1.0)


@NORMALIZATIONS.register("token-mean")
def token_mean(mask: torch.Tensor) -> torch.Tensor:
    """sum(m l) / sum(m)."""

    return mask / mask.sum().clamp(min=1.0)


@NORMALIZATIONS.register("seq-mean-token-mean", reads=("normalization.count_empty_rows",))
def seq_mean_token_mean(mask: torch.Tensor, count_empty_rows: bool) -> torch.Tensor:
    """(1/B) sum_i sum_t m l / T_i."""

    T_i = mask.sum(1)
    return mask / (_rows(mask, count_empty_rows) * T_i.clamp(min=1.0))[:, None]


@NORMALIZATIONS.register("seq-mean-token-sum", reads=("normalization.count_empty_rows",))
def seq_mean_token_sum(mask: torch.Tensor, count_empty_rows: bool) -> torch.Tensor:
    """(1/B) sum_i sum_t m l."""

    return mask / _rows(mask, count_empty_rows)


@NORMALIZATIONS.register(
    "constant", reads=("normalization.l_max", "normalization.count_empty_rows")
)
def constant(mask: torch.Tensor, l_max: int | None, count_empty_rows: bool) -> torch.Tensor:
    """sum(m l) / (B * L_max) (Dr. GRPO); L_max is the generation budget."""

    if not l_max:
        raise ValueError("normalization mode 'constant' needs l_max (the generation budget)")
    return mask / (_rows(mask, count_empty_rows) * float(l_max))


MODES = tuple(NORMALIZATIONS)


def loss_weights(
    mask: torch.Tensor, mode: str, l_max: int | None = None, count_empty_rows: bool = False
) -> torch.Tensor:
    """Weights ``[B, T]`` such that the aggregated loss is ``(weights * loss).sum()``.

    - token-mean:           sum(m l) / sum(m)
    - seq-mean-token-mean:  (1/B) sum_i sum_t m l / T_i
    - seq-mean-token-sum:   (1/B) sum_i sum_t m l
    - constant:             sum(m l) / (B * L_max)   (Dr. GRPO)

    B counts non-empty rows unless ``count_empty_rows``. An unknown ``mode`` raises
    :class:`~sixblanks.algorithms.errors.UnknownNameError` listing the valid modes.
    """

    fields = {"normalization.l_max": l_max, "normalization.count_empty_rows": count_empty_rows}
    w = NORMALIZATIONS[mode].call({"mask": mask.double()}, fields)
    return w.to(mask.dtype if mask.is_floating_point() else torch.float32)


def aggregate(loss: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Scalar loss: sum of ``weights * loss`` (both ``[B, T]``)."""

    return (loss * weights).sum()
