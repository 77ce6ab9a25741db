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
    """Rotated queries ``[..., H, D]``, rotated keys and values ``[..., K, D]`` of ``h``
    ``[..., hidden]`` (cos and :func:`signed_sin` broadcast to ``[..., 1, D]``), as transformers'
    Llama attention makes them: ``y * cos + rotate_half(y) * sin``, the same arithmetic."""

    a = layer.self_attn
    x = layer.input_layernorm(h)
    shape = (*h.shape[:-1], -1, D)
    q, k, v = a.q_proj(x).view(shape), a.k_proj(x).view(shape), a.v_proj(x).view(shape)

    def rot(y):
        return y * cos + y.roll(D // 2, -1) * sin_s

    return rot(q), rot(k), v


def _padded(packed: torch.Tensor, where: torch.Tensor, B: int, R: int) -> torch.Tensor:
    """``packed`` ``[N, heads, D]`` (the real tokens) placed at their rows' positions ``where``
    ``[N]`` (indices into ``B * R``) of a zero ``[B, heads, R, D]`` block."""

    out = packed.new_zeros((B * R, *packed.shape[1:])).index_copy(0, where, packed)
    return out.view(B, R, *packed.shape[1:]).transpose(1, 2)


class _Blocks:
    """One decoder layer over the two blocks: the ``P`` prefixes ``[P, s, hidden]`` and the rows'
    ``N`` real later tokens ``[N, hidden]`` (see :func:`prefix_logits`). ``row`` ``[B]``: each
    row's prefix; ``where`` ``[N]``: the real tokens' places in ``B * R``; ``rep``: query heads per
    key/value head (``gqa``: by SDPA's enable_gqa); ``mask`` ``[R, s + R]``."""

    def __init__(self, row, where, B: int, R: int, D: int, rep: int, gqa: bool, mask):
        self.row, self.where, self.B, self.R, self.D = row, where, B, R, D
        self.rep, self.gqa, self.mask = rep, gqa, mask

    def layer(self, layer, hp, hr, rot_p, rot_r):
        """The two blocks after ``layer`` (``rot_p``, ``rot_r``: their (cos, signed sin))."""

        a, B, R, D, where, gqa = layer.self_attn, self.B, self.R, self.D, self.where, self.gqa
        qp, kp, vp = (y.transpose(1, 2) for y in _qkv(layer, hp, *rot_p, D))
        qr, kr, vr = (_padded(y, where, B, R) for y in _qkv(layer, hr, *rot_r, D))
        if self.rep > 1 and not gqa:
            kp, vp, kr, vr = (x.repeat_interleave(self.rep, 1) for x in (kp, vp, kr, vr))
        op = F.scaled_dot_product_attention(
            qp, kp, vp, is_causal=True, scale=a.scaling, enable_gqa=gqa
        )
        keys, values = torch.cat([kp[self.row], kr], 2), torch.cat([vp[self.row], vr], 2)
        o = F.scaled_dot_product_attention(
            qr, keys, values, attn_mask=self.mask, scale=a.scaling, enable_gqa=gqa
        )
        o = o.transpose(1, 2).reshape(B * R, -1).index_select(0, where)  # [N, H * D]
        hp = hp + a.o_proj(op.transpose(1, 2).reshape(*hp.shape[:2], -1))
        hr = hr + a.o_proj(o)
        hp = hp + layer.mlp(layer.post_attention_layernorm(hp))
        hr = hr + layer.mlp(layer.post_attention_layernorm(hr))
        return hp, hr


def prefix_logits(
    model, tokens: torch.Tensor, split: int, attention_mask: torch.Tensor | None = None
) -> torch.Tensor | None:
    """Logits ``[B, T - 1, V]`` (position t predicts ``tokens[:, t + 1]``, as
    ``model(tokens).logits[:, :-1]``) with the batch's distinct ``split``-token prefixes computed
    once each; None where that does not pay (fewer than two rows a prefix on average, or ``split``
    outside ``[1, T - 2]``). ``tokens`` ``[B, T]`` right-padded, real on ``[:, :split]``.

    ``attention_mask`` ``[B, T]`` (1 on real tokens; None: every token real): the rows' tokens
    after the prefix go through the projections, the MLP and the head packed, ``N`` real tokens
    without the padding (a batch of answers of uneven length is mostly padding: about half of a
    GRPO batch's positions on the testbed); only the attention sees them laid out by row. A padding
    position's logits are 0: it predicts nothing a loss reads."""

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
    R = T - 1 - split
    rest = tokens[:, split : T - 1]  # [B, R]
    if attention_mask is None:
        real = torch.ones_like(rest, dtype=torch.bool)
    else:
        real = attention_mask[:, split : T - 1].bool()
    where = real.reshape(-1).nonzero().squeeze(1)  # [N] real tokens' places in B * R
    hp = body.embed_tokens(prefixes)  # [P, s, hidden]
    hr = body.embed_tokens(rest.reshape(-1)[where])  # [N, hidden]
    positions = torch.arange(T - 1, device=tokens.device)[None]
    cos, sin = body.rotary_emb(hp, positions)  # [1, T - 1, D]
    sin = signed_sin(sin)
    at = split + where % R  # [N] each real token's position
    rot_p = cos[:, :split, None], sin[:, :split, None]  # [1, s, 1, D] each
    rot_r = cos[0, at, None], sin[0, at, None]  # [N, 1, D] each
    # a row's later token sees its whole prefix and, causally, its own tokens (right padding sits
    # after every real token, so no real query sees it)
    mask = torch.ones((R, split + R), dtype=torch.bool, device=tokens.device)
    mask[:, split:] = torch.ones((R, R), dtype=torch.bool, device=tokens.device).tril()
    blocks = _Blocks(row, where, B, R, D, rep, gqa, mask)
    for layer in body.layers:
        hp, hr = blocks.layer(layer, hp, hr, rot_p, rot_r)
    lp = model.lm_head(body.norm(hp))[row]  # [B, s, V]: a prefix's logits, to each of its rows
    lr = model.lm_head(body.norm(hr))  # [N, V]
    lr = lr.new_zeros((B * R, lr.shape[-1])).index_copy(0, where, lr).view(B, R, -1)
    return torch.cat([lp, lr], 1)
