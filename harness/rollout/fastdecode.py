"""A static-KV-cache decoder for Llama-architecture policies (issue 21, item 2).

transformers' generic forward spends most of a tiny model's decode step in Python: cache objects,
a 4-D mask rebuilt at every token, keyword plumbing. :class:`LlamaDecoder` runs the same model
(its own modules and weights, nothing copied) through a preallocated key/value cache in plain
torch ops: one embedding lookup, per layer the model's norms, projections and MLP, and one
``scaled_dot_product_attention`` over the cache with a boolean padding mask. Its logits equal the
model's own forward (tests/test_rollout.py checks them to 1e-5, prefill and every step), so the
trajectory contract's log-prob check holds unchanged.

Used by :class:`~sixblanks.harness.rollout.engine.HFEngine` where :func:`supported` says so
(``rollout.decode: auto``); any other architecture, a LoRA wrapper or a reference with its adapter
disabled takes transformers' path.

Shapes: ``B`` sequences, ``L`` prompt length (left-padded), ``S`` cache length, ``H`` query heads,
``K`` key/value heads, ``D`` head size, ``V`` vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def supported(model) -> bool:
    """Whether ``model`` is a plain transformers Llama causal LM this decoder reproduces."""

    if type(model).__name__ != "LlamaForCausalLM":
        return False
    c = model.config
    rope = getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {}
    return (
        getattr(c, "hidden_act", "silu") == "silu"
        and not getattr(c, "attention_bias", False)
        and rope.get("rope_type", "default") == "default"
        and getattr(model.model, "rotary_emb", None) is not None
        and not getattr(model, "is_gradient_checkpointing", False)
    )


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of ``x`` [B, heads, T, D] with ``cos``/``sin`` [B, 1, T, D]."""

    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class LlamaDecoder:
    """Prefill a left-padded batch, then one token per :meth:`step`; returns last-position logits.

    Args:
        model: a ``LlamaForCausalLM`` (see :func:`supported`), in eval mode.
        ids, attn: ``[B, L]`` left-padded prompts and their attention mask (1 on real tokens).
        max_new: the most tokens :meth:`step` will be called for.
    """

    def __init__(self, model, ids: torch.Tensor, attn: torch.Tensor, max_new: int):
        c = model.config
        self.model, self.body = model, model.model
        self.H, self.K = c.num_attention_heads, c.num_key_value_heads
        self.D = getattr(c, "head_dim", None) or c.hidden_size // self.H
        B, L = ids.shape
        S = L + max_new
        dev, dtype = ids.device, next(model.parameters()).dtype
        n = len(self.body.layers)
        self.k = torch.zeros((n, B, self.K, S, self.D), dtype=dtype, device=dev)
        self.v = torch.zeros_like(self.k)
        self.valid = torch.zeros((B, S), dtype=torch.bool, device=dev)
        self.valid[:, :L] = attn.bool()
        self.pos = (attn.cumsum(-1) - 1).clamp(min=0)  # [B, L] positions of the prompt tokens
        self.length = 0  # cache entries filled
        self.ids, self.attn = ids, attn

    def _layers(self, h: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``h`` [B, T, hidden] at positions ``pos`` [B, T], written to the cache after what it
        holds; ``mask`` [B, 1, T, S'] the keys each query sees (S' = filled length after)."""

        B, T, _ = h.shape
        cos, sin = self.body.rotary_emb(h, pos)
        cos, sin = cos[:, None], sin[:, None]
        start, end = self.length, self.length + T
        for i, layer in enumerate(self.body.layers):
            att = layer.self_attn
            x = layer.input_layernorm(h)
            q = att.q_proj(x).view(B, T, self.H, self.D).transpose(1, 2)
            k = att.k_proj(x).view(B, T, self.K, self.D).transpose(1, 2)
            v = att.v_proj(x).view(B, T, self.K, self.D).transpose(1, 2)
            self.k[i, :, :, start:end] = _rotate(k, cos, sin)
            self.v[i, :, :, start:end] = v
            o = F.scaled_dot_product_attention(
                _rotate(q, cos, sin),
                self.k[i, :, :, :end],
                self.v[i, :, :, :end],
                attn_mask=mask,
                scale=att.scaling,
                enable_gqa=self.H != self.K,
            )
            h = h + att.o_proj(o.transpose(1, 2).reshape(B, T, self.H * self.D))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        self.length = end
        return self.model.lm_head(self.body.norm(h[:, -1]))

    @torch.no_grad()
    def prefill(self) -> torch.Tensor:
        """Logits ``[B, V]`` after the prompts. A padding query sees every earlier position (its
        output is never used; a row with no key at all would make NaN that later layers' padding
        keys and values would carry)."""

        B, L = self.ids.shape
        causal = torch.ones((L, L), dtype=torch.bool, device=self.ids.device).tril()
        real = self.attn.bool()
        mask = causal[None] & (real[:, None, :] | ~real[:, :, None])  # [B, L, L]
        return self._layers(self.body.embed_tokens(self.ids), self.pos, mask[:, None])

    @torch.no_grad()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, V]`` after appending ``tokens`` [B]."""

        self.valid[:, self.length] = True
        pos = self.pos[:, -1:] + 1 + (self.length - self.pos.shape[1])
        mask = self.valid[:, None, None, : self.length + 1]  # [B, 1, 1, S']
        return self._layers(self.body.embed_tokens(tokens[:, None]), pos, mask)
