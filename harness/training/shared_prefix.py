"""The training forward with each distinct prompt computed once.

A GRPO batch holds ``G`` samples of every prompt, so transformers' forward over the full sequences
computes every prompt ``G`` times, and the batch's last token, which predicts nothing, once per
row. :func:`prefix_logits` runs a Llama-architecture policy (:func:`fastdecode.supported`) in two
blocks per layer: the ``P`` distinct prefixes of the batch once each, then every row's remaining
tokens attending to its prefix's keys and values and causally to its own. The model's own modules
and weights do the work (norms, projections, MLP, head); only the split of the attention is new.
Log-probs and gradients equal the full forward's to float32 rounding (tests/test_shared_prefix.py
checks both against it); a batch with fewer than two rows a prefix, gradient checkpointing,
attention dropout or any other architecture takes transformers' forward.

Shapes: ``B`` rows, ``T`` tokens (right-padded), ``s`` the split (prefix length), ``P`` distinct
prefixes, ``R = T - 1 - s`` tokens after the prefix that are inputs, ``V`` vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..rollout.fastdecode import supported


def split_point(action_mask: torch.Tensor, attention_mask: torch.Tensor) -> int:
    """The longest prefix every row holds before its first trained token: the minimum over rows of
    the first position with ``action_mask`` 1 (a row without one: its length). ``[B, T]`` each."""

    act = action_mask > 0
    length = attention_mask.sum(-1)
    first = torch.where(act.any(-1), act.float().argmax(-1), length)
    return int(first.min()) if first.numel() else 0


def usable(model) -> bool:
    """Whether :func:`prefix_logits` reproduces ``model``'s training forward."""

    name = (  # transformers 5 renamed it (the old name warns)
        "is_activation_checkpointing"
        if hasattr(type(model), "is_activation_checkpointing")
        else "is_gradient_checkpointing"
    )
    return (
        supported(model)
        and not getattr(model, name, False)
        and not (model.training and getattr(model.config, "attention_dropout", 0.0))
    )


def native_gqa(device: torch.device) -> bool:
    """Whether SDPA's ``enable_gqa`` with a mask keeps a fused kernel on ``device`` (the CPU's
    flash kernel does; CUDA's fall back to the math kernel, which keeps every attention weight)."""

    return device.type == "cpu"


def signed_sin(sin: torch.Tensor) -> torch.Tensor:
    """``sin`` ``[..., D]`` with its first half negated: ``rotate_half(y) * sin`` equals
    ``y.roll(D // 2, -1) * signed_sin(sin)`` bit for bit (``(-a) * b == a * (-b)`` exactly), in one
    operation instead of four (a negation, two slices and a concatenation), forward and backward."""

    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


def _qkv(layer, h: torch.Tensor, cos: torch.Tensor, sin_s: torch.Tensor, D: int):
    """Rotated queries ``[b, H, t, D]``, rotated keys and values ``[b, K, t, D]`` of ``h``
    ``[b, t, hidden]`` (cos and :func:`signed_sin` ``[1, 1, t, D]``), as transformers' Llama
    attention makes them: ``y * cos + rotate_half(y) * sin``, the same arithmetic."""

    a = layer.self_attn
    x = layer.input_layernorm(h)
    shape = (*h.shape[:2], -1, D)
    q = a.q_proj(x).view(shape).transpose(1, 2)
    k = a.k_proj(x).view(shape).transpose(1, 2)
    v = a.v_proj(x).view(shape).transpose(1, 2)

    def rot(y):
        return y * cos + y.roll(D // 2, -1) * sin_s

    return rot(q), rot(k), v


def prefix_logits(model, tokens: torch.Tensor, split: int) -> torch.Tensor | None:
    """Logits ``[B, T - 1, V]`` (position t predicts ``tokens[:, t + 1]``, as
    ``model(tokens).logits[:, :-1]``) with the batch's distinct ``split``-token prefixes computed
    once each; None where that does not pay (fewer than two rows a prefix on average, or ``split``
    outside ``[1, T - 2]``). ``tokens`` ``[B, T]`` right-padded, real on ``[:, :split]``."""

    B, T = tokens.shape
    if not 1 <= split <= T - 2:
        return None
    prefixes, row = torch.unique(tokens[:, :split], dim=0, return_inverse=True)  # [P, s], [B]
    if 2 * prefixes.shape[0] > B:  # fewer than two rows a prefix: two blocks cost more than one
        return None
    body = model.model
    c = model.config
    H = c.num_attention_heads
    D = getattr(c, "head_dim", None) or c.hidden_size // H
    # grouped-query attention: SDPA's enable_gqa on the CPU; on an accelerator keys and values
    # repeated per query head (with a mask and enable_gqa, CUDA falls back to the math kernel)
    rep = H // c.num_key_value_heads
    gqa = rep > 1 and native_gqa(tokens.device)
    hp = body.embed_tokens(prefixes)  # [P, s, hidden]
    hr = body.embed_tokens(tokens[:, split : T - 1])  # [B, R, hidden]
    R = hr.shape[1]
    positions = torch.arange(T - 1, device=tokens.device)[None]
    cos, sin = body.rotary_emb(hp, positions)  # [1, T - 1, D]
    sin = signed_sin(sin)
    cos_p, sin_p = cos[:, None, :split], sin[:, None, :split]
    cos_r, sin_r = cos[:, None, split:], sin[:, None, split:]
    # a row's later token sees its whole prefix and, causally, its own tokens (right padding sits
    # after every real token, so no real query sees it)
    mask = torch.ones((R, split + R), dtype=torch.bool, device=tokens.device)
    mask[:, split:] = torch.ones((R, R), dtype=torch.bool, device=tokens.device).tril()
    for layer in body.layers:
        a = layer.self_attn
        qp, kp, vp = _qkv(layer, hp, cos_p, sin_p, D)
        qr, kr, vr = _qkv(layer, hr, cos_r, sin_r, D)
        if rep > 1 and not gqa:
            kp, vp, kr, vr = (x.repeat_interleave(rep, 1) for x in (kp, vp, kr, vr))
        op = F.scaled_dot_product_attention(
            qp, kp, vp, is_causal=True, scale=a.scaling, enable_gqa=gqa
        )
        keys, values = torch.cat([kp[row], kr], 2), torch.cat([vp[row], vr], 2)
        o = F.scaled_dot_product_attention(
            qr, keys, values, attn_mask=mask, scale=a.scaling, enable_gqa=gqa
        )
        hp = hp + a.o_proj(op.transpose(1, 2).reshape(*hp.shape[:2], -1))
        hr = hr + a.o_proj(o.transpose(1, 2).reshape(B, R, -1))
        hp = hp + layer.mlp(layer.post_attention_layernorm(hp))
        hr = hr + layer.mlp(layer.post_attention_layernorm(hr))
    # the prefix's hidden states to its rows first: one [B, T - 1, V] logits tensor, not two
    return model.lm_head(body.norm(torch.cat([hp[row], hr], 1)))
