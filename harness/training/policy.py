"""Trainer-side forward passes of the policy."""

from __future__ import annotations

import torch

from sixblanks.algorithms.logprobs import token_logprobs

from .shared_prefix import prefix_logits, usable


def policy_forward(
    model,
    tokens,
    attention_mask,
    temperature=1.0,
    *,
    top_k=0,
    top_p=1.0,
    entropy=False,
    want_hidden=False,
    split=0,
    skip_padding=True,
):
    """(logprobs [B, T], entropy [B, T] or None, last hidden state [B, T, H] or None) in one
    forward.

    ``split``: a prefix length every row holds before its first trained token (0: none); where
    rows share such prefixes (GRPO's groups) and :func:`shared_prefix.usable` holds, each distinct
    prefix is computed once (:func:`shared_prefix.prefix_logits`: the same log-probs to float
    rounding); ``skip_padding``: that path computes the tokens after the prefix without their
    padding (see :func:`shared_prefix.prefix_logits`; False: padded, as the model's forward)."""

    dev = next(model.parameters()).device
    tokens, attention_mask = tokens.to(dev), attention_mask.to(dev)
    logits, hidden = None, None
    if split and not want_hidden and usable(model) and bool(attention_mask[:, :split].all()):
        logits = prefix_logits(model, tokens, split, attention_mask if skip_padding else None)
    if logits is None:
        out = model(
            input_ids=tokens,
            attention_mask=attention_mask,
            use_cache=False,
            output_hidden_states=want_hidden,
        )
        logits = out.logits[:, :-1]
        hidden = out.hidden_states[-1] if want_hidden else None
    lp, ent = token_logprobs(
        logits, tokens[:, 1:], temperature, top_k=top_k, top_p=top_p, entropy=entropy
    )
    zero = torch.zeros(tokens.shape[0], 1, dtype=lp.dtype, device=lp.device)
    lp = torch.cat([zero, lp], 1)
    if ent is not None:
        ent = torch.cat([zero, ent], 1)
    return lp, ent, hidden


def policy_logprobs(
    model,
    tokens: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    *,
    top_k: int = 0,
    top_p: float = 1.0,
    entropy: bool = False,
    split: int = 0,
    skip_padding: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob ``[B, T]`` of each token given its prefix (position 0 gets 0), and optionally
    entropy.

    Args:
        tokens: ``[B, T]`` right-padded token ids; attention_mask: ``[B, T]``.
        temperature, top_k, top_p: the sampling distribution the log-probs refer to.
        split, skip_padding: see :func:`policy_forward` (split 0: the model's own forward over
            every full sequence).
    """

    lp, ent, _ = policy_forward(
        model,
        tokens,
        attention_mask,
        temperature,
        top_k=top_k,
        top_p=top_p,
        entropy=entropy,
        split=split,
        skip_padding=skip_padding,
    )
    return lp, ent
