"""The normalization blank Z: per-token loss weights over the whole optimizer-step batch.

Computing the weights once on the full batch, then summing ``weights * loss`` over
any split of the rows, makes micro-batching (gradient accumulation) exact: the
sum over micro-batches equals the full-batch loss, and so do the gradients.
"""

from __future__ import annotations

import torch

MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "constant")


def loss_weights(
    mask: torch.Tensor, mode: str, l_max: int | None = None, count_empty_rows: bool = False
) -> torch.Tensor:
    """Weights ``[B, T]`` such that the aggregated loss is ``(weights * loss).sum()``.

    - token-mean:           sum(m l) / sum(m)
    - seq-mean-token-mean:  (1/B) sum_i sum_t m l / T_i
    - seq-mean-token-sum:   (1/B) sum_i sum_t m l
    - constant:             sum(m l) / (B * L_max)   (Dr. GRPO)

    B counts non-empty rows unless ``count_empty_rows``.
    """

    m = mask.double()
    T_i = m.sum(1)
    B = float(mask.shape[0]) if count_empty_rows else float((T_i > 0).sum())
    B = max(B, 1.0)
    if mode == "token-mean":
        w = m / m.sum().clamp(min=1.0)
    elif mode == "seq-mean-token-mean":
        w = m / (B * T_i.clamp(min=1.0))[:, None]
    elif mode == "seq-mean-token-sum":
        w = m / B
    elif mode == "constant":
        if not l_max:
            raise ValueError("normalization mode 'constant' needs l_max (the generation budget)")
        w = m / (B * float(l_max))
    else:
        from .presets import UnknownNameError

        raise UnknownNameError("normalization mode", mode, list(MODES))
    return w.to(mask.dtype if mask.is_floating_point() else torch.float32)


def aggregate(loss: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Scalar loss: sum of ``weights * loss`` (both ``[B, T]``)."""

    return (loss * weights).sum()
