"""The normalization blank Z: per-token loss weights over the whole optimizer-step batch.

Computing the weights once on the full batch, then summing ``weights * loss`` over
any split of the rows, makes micro-batching (gradient accumulation) exact: the
sum over micro-batches equals the full-batch loss, and so do the gradients.

``NORMALIZATIONS[mode](mask, **fields)`` gives the weights ``[B, T]`` (float64) of a mode from
the float64 mask ``[B, T]`` (and, for the modes that declare them, the prompt group of each row
``group_ids [B]`` or the turn of each token ``turn_ids [B, T]``); each mode declares the
``normalization.*`` fields it reads.
"""

from __future__ import annotations

import torch

from .registry import Registry

NORMALIZATIONS = Registry("normalization mode", inputs=("mask",))
"""normalization.mode -> its weights function."""


def _rows(mask: torch.Tensor, count_empty_rows: bool) -> float:
    """B: the rows of ``mask`` ``[B, T]``, all-masked ones only if ``count_empty_rows`` (>= 1)."""

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


@NORMALIZATIONS.register("token-sum")
def token_sum(mask: torch.Tensor) -> torch.Tensor:
    """sum(m l): no denominator (verl's ``token-sum``); the gradient grows with the batch's tokens.
    ``mask [B, T]`` -> weights ``[B, T]``."""

    return mask.clone()


def _dense(ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Dense index ``[B]`` (0..n-1) of ``ids`` ``[B]`` and the number of distinct ids."""

    uniq, inv = torch.unique(ids, return_inverse=True)
    return inv, int(uniq.numel())


def _units(mask: torch.Tensor, ids: torch.Tensor, count_empty: bool) -> tuple[torch.Tensor, float]:
    """Per row ``[B]``: the action tokens of the row's unit (rows sharing an id in ``ids [B]``), and
    P, the number of units (those with no action token only if ``count_empty``; >= 1)."""

    inv, n = _dense(ids)
    per_row = mask.sum(1)
    tokens = torch.zeros(n, dtype=mask.dtype).index_add_(0, inv, per_row)
    P = float(n) if count_empty else float((tokens > 0).sum())
    return tokens[inv], max(P, 1.0)


@NORMALIZATIONS.register(
    "prompt-mean",
    inputs=("mask", "group_ids"),
    reads=("normalization.count_empty_rows",),
)
def prompt_mean(
    mask: torch.Tensor, group_ids: torch.Tensor, count_empty_rows: bool
) -> torch.Tensor:
    """ScaleRL's prompt-level mean: a token-mean inside each prompt's group, then the mean over
    prompts, (1/P) sum_g [sum_{i in g} sum_t m l / sum_{i in g} sum_t m]. Every token of a group
    weighs alike, so a group's long answers outweigh its short ones (unlike ``task-mean``). P counts
    the groups with an action token (all of them with ``count_empty_rows``).
    ``group_ids [B]``: the prompt group of each row."""

    tokens, P = _units(mask, group_ids, count_empty_rows)
    return mask / (P * tokens.clamp(min=1.0))[:, None]


@NORMALIZATIONS.register(
    "task-mean",
    inputs=("mask", "group_ids"),
    reads=("normalization.count_empty_rows",),
)
def task_mean(mask: torch.Tensor, group_ids: torch.Tensor, count_empty_rows: bool) -> torch.Tensor:
    """Each task (prompt group) weighs alike, each of its sequences alike, each sequence's tokens
    alike: (1/P) sum_g (1/G_g) sum_{i in g} sum_t m l / T_i (the mean over prompts of the mean of
    per-sequence token-means). With equal group sizes this equals ``seq-mean-token-mean``; it
    differs from ``prompt-mean`` unless every sequence of a group has the same length. G_g and P
    count the rows and groups with an action token (all of them with ``count_empty_rows``)."""

    T_i = mask.sum(1)
    has = (T_i > 0).to(mask.dtype) if not count_empty_rows else torch.ones_like(T_i)
    inv, n = _dense(group_ids)
    rows = torch.zeros(n, dtype=mask.dtype).index_add_(0, inv, has)
    P = float(n) if count_empty_rows else float((rows > 0).sum())
    per_row = max(P, 1.0) * rows[inv].clamp(min=1.0) * T_i.clamp(min=1.0)
    return mask / per_row[:, None]


@NORMALIZATIONS.register("turn-mean", inputs=("mask", "turn_ids"))
def turn_mean(mask: torch.Tensor, turn_ids: torch.Tensor) -> torch.Tensor:
    """Each turn weighs alike: (1/N) sum_{turns k} sum_{t in k} m l / |k|, N the batch's turns with
    an action token and |k| the turn's action tokens. A single-turn batch gives
    ``seq-mean-token-mean``. ``turn_ids [B, T]``: the environment turn of each action token (-1
    elsewhere)."""

    on = mask > 0
    B = mask.shape[0]
    key = torch.arange(B)[:, None] * (int(turn_ids.max()) + 2 if turn_ids.numel() else 1)
    key = (key + turn_ids.long() + 1)[on]
    w = torch.zeros_like(mask)
    if key.numel() == 0:
        return w
    inv, n = _dense(key)
    size = torch.zeros(n, dtype=mask.dtype).index_add_(0, inv, mask[on])
    w[on] = mask[on] / (size[inv] * n)
    return w


MODES = tuple(NORMALIZATIONS)


def loss_weights(
    mask: torch.Tensor,
    mode: str,
    l_max: int | None = None,
    count_empty_rows: bool = False,
    *,
    group_ids: torch.Tensor | None = None,
    turn_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Weights ``[B, T]`` such that the aggregated loss is ``(weights * loss).sum()``.

    - token-mean:           sum(m l) / sum(m)
    - seq-mean-token-mean:  (1/B) sum_i sum_t m l / T_i
    - seq-mean-token-sum:   (1/B) sum_i sum_t m l
    - constant:             sum(m l) / (B * L_max)   (Dr. GRPO)
    - token-sum:            sum(m l)
    - prompt-mean:          (1/P) sum_g sum_{i in g} sum_t m l / sum_{i in g} T_i   (ScaleRL)
    - task-mean:            (1/P) sum_g (1/G_g) sum_{i in g} sum_t m l / T_i
    - turn-mean:            (1/N) sum_turns sum_{t in turn} m l / |turn|

    B counts non-empty rows unless ``count_empty_rows``. ``group_ids [B]`` (prompt-mean,
    task-mean) and ``turn_ids [B, T]`` (turn-mean) are needed by the modes that read them. An
    unknown ``mode`` raises :class:`~sixblanks.algorithms.errors.UnknownNameError` listing the
    valid modes.
    """

    fields = {"normalization.l_max": l_max, "normalization.count_empty_rows": count_empty_rows}
    variant = NORMALIZATIONS[mode]
    tensors = {"mask": mask.double(), "group_ids": group_ids, "turn_ids": turn_ids}
    missing = [k for k in variant.inputs or () if tensors[k] is None]
    if missing:
        raise ValueError(f"normalization mode '{mode}' needs {', '.join(missing)}")
    w = variant.call(tensors, fields)
    return w.to(mask.dtype if mask.is_floating_point() else torch.float32)


def aggregate(loss: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Scalar loss: sum of ``weights * loss`` (both ``[B, T]``)."""

    return (loss * weights).sum()
