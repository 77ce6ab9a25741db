"""Per-token log-probs and entropy of the sampling distribution.

The rollout engine and the trainer must agree on the distribution a token was
sampled from: ``softmax(filter(logits / temperature))`` where ``filter`` is
top-k then top-p (nucleus). Both call :func:`process_logits`, so on-policy
ratios are exactly 1 up to floating-point noise.

:func:`token_logprobs` computes log-probs (and optionally entropy) chunk by
chunk over the sequence with a custom backward, so a ``[B, T, V]`` logits
tensor is the only full-size float tensor alive (plus its gradient in
backward); the naive ``log_softmax(logits).gather(...)`` materializes a second
``[B, T, V]`` tensor and keeps it for backward.
"""

from __future__ import annotations

import torch


def process_logits(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """Logits of the distribution actually sampled from.

    Args:
        logits: ``[..., V]`` raw model logits.
        temperature: > 0 (greedy decoding is argmax of the raw logits; use 1.0 to score it).
        top_k: keep the k largest logits (0: off).
        top_p: keep the smallest set of tokens whose probability mass reaches top_p (1.0: off).

    Returns:
        ``[..., V]`` logits with filtered tokens set to ``-inf``; ``log_softmax`` of it is the
        sampling distribution's log-probability.
    """

    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 to define a distribution (got {temperature})")
    out = logits.float() / temperature if temperature != 1.0 else logits.float()
    if top_k and top_k < out.shape[-1]:
        kth = torch.topk(out, top_k, dim=-1).values[..., -1:]
        out = out.masked_fill(out < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, idx = torch.sort(out, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # drop a token when the mass strictly before it already reaches top_p (keep the first)
        before = torch.cumsum(probs, dim=-1) - probs
        remove_sorted = before >= top_p
        remove = torch.zeros_like(remove_sorted).scatter(-1, idx, remove_sorted)
        out = out.masked_fill(remove, float("-inf"))
    return out


class _ChunkedLogProb(torch.autograd.Function):
    """log p(target) and entropy of softmax(logits / T), chunked over the sequence."""

    @staticmethod
    def forward(ctx, logits, targets, temperature, chunk, want_entropy):  # type: ignore[override]
        B, T, V = logits.shape
        lp = torch.empty(B, T, dtype=torch.float32, device=logits.device)
        ent = torch.empty(B, T, dtype=torch.float32, device=logits.device) if want_entropy else None
        for s in range(0, T, chunk):
            z = logits[:, s : s + chunk].float() / temperature
            lse = torch.logsumexp(z, dim=-1)
            lp[:, s : s + chunk] = z.gather(-1, targets[:, s : s + chunk, None]).squeeze(-1) - lse
            if want_entropy:
                p = torch.softmax(z, dim=-1)
                ent[:, s : s + chunk] = lse - (p * z).sum(-1)
        ctx.save_for_backward(logits, targets)
        ctx.temperature, ctx.chunk, ctx.want_entropy = temperature, chunk, want_entropy
        if want_entropy:
            return lp, ent
        return lp, torch.zeros(0, device=logits.device)

    @staticmethod
    def backward(ctx, grad_lp, grad_ent):  # type: ignore[override]
        logits, targets = ctx.saved_tensors
        T_, chunk = ctx.temperature, ctx.chunk
        grad = torch.empty_like(logits)
        for s in range(0, logits.shape[1], chunk):
            z = logits[:, s : s + chunk].float() / T_
            p = torch.softmax(z, dim=-1)
            g_lp = grad_lp[:, s : s + chunk, None] if grad_lp is not None else None
            # d log p_y / d z = onehot(y) - p
            g = torch.zeros_like(z)
            if g_lp is not None:
                g = -p * g_lp
                g.scatter_add_(-1, targets[:, s : s + chunk, None], g_lp)
            if ctx.want_entropy and grad_ent is not None and grad_ent.numel():
                logp = torch.log_softmax(z, dim=-1)
                h = -(p * logp).sum(-1, keepdim=True)
                # d H / d z_j = -p_j (log p_j + H)
                g = g - p * (logp + h) * grad_ent[:, s : s + chunk, None]
            grad[:, s : s + chunk] = (g / T_).to(grad.dtype)
        return grad, None, None, None, None


def token_logprobs(
    logits: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    *,
    top_k: int = 0,
    top_p: float = 1.0,
    entropy: bool = False,
    chunk: int = 128,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probability of ``targets`` under the sampling distribution, and its entropy.

    Args:
        logits: ``[B, T, V]`` logits predicting ``targets`` (already shifted: logits[:, t] predicts
            targets[:, t]).
        targets: ``[B, T]`` token ids.
        temperature, top_k, top_p: the sampling settings (see :func:`process_logits`).
        entropy: also return the entropy ``[B, T]`` of the (temperature-scaled) distribution.
        chunk: sequence positions per chunk in the memory-lean path.

    Returns:
        ``(logprobs [B, T], entropy [B, T] or None)``, float32, differentiable w.r.t. ``logits``.
    """

    if top_k or top_p < 1.0:
        # filtering needs the sorted distribution; use the plain path (not memory-lean)
        z = process_logits(logits, temperature, top_k, top_p)
        logp = torch.log_softmax(z, dim=-1)
        lp = logp.gather(-1, targets[..., None]).squeeze(-1)
        ent = None
        if entropy:
            p = logp.exp()
            ent = -(p * logp.masked_fill(~torch.isfinite(logp), 0.0)).sum(-1)
        return lp, ent
    lp, ent = _ChunkedLogProb.apply(logits, targets, float(temperature), int(chunk), bool(entropy))
    return lp, (ent if entropy else None)
