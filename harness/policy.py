"""Trainer-side forward passes of the policy."""

from __future__ import annotations

import torch

from sixblanks.algorithms.logprobs import token_logprobs


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
):
    """(logprobs [B, T], entropy [B, T] or None, last hidden state [B, T, H] or None) in one forward."""

    dev = next(model.parameters()).device
    tokens, attention_mask = tokens.to(dev), attention_mask.to(dev)
    out = model(
        input_ids=tokens,
        attention_mask=attention_mask,
        use_cache=False,
        output_hidden_states=want_hidden,
    )
    lp, ent = token_logprobs(
        out.logits[:, :-1], tokens[:, 1:], temperature, top_k=top_k, top_p=top_p, entropy=entropy
    )
    zero = torch.zeros(tokens.shape[0], 1, dtype=lp.dtype, device=lp.device)
    lp = torch.cat([zero, lp], 1)
    if ent is not None:
        ent = torch.cat([zero, ent], 1)
    hidden = out.hidden_states[-1] if want_hidden else None
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
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob ``[B, T]`` of each token given its prefix (position 0 gets 0), and optionally entropy.

    Args:
        tokens: ``[B, T]`` right-padded token ids; attention_mask: ``[B, T]``.
        temperature, top_k, top_p: the sampling distribution the log-probs refer to.
    """

    lp, ent, _ = policy_forward(
        model, tokens, attention_mask, temperature, top_k=top_k, top_p=top_p, entropy=entropy
    )
    return lp, ent
