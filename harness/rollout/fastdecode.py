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
        # per call, from the current weights: q, k, v and gate, up as one projection each; the
        # rotary table of every position the batch reaches
        with torch.no_grad():
            self.qkv = [
                torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])
                for a in (layer.self_attn for layer in self.body.layers)
            ]
            self.gate_up = [
                torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight])
                for layer in self.body.layers
            ]
            table = torch.arange(S, device=dev)[None]
            cos, sin = self.body.rotary_emb(torch.zeros(1, dtype=dtype, device=dev), table)
        self.cos, self.sin = cos[0], sin[0]  # [S, D]
        self.act = self.body.layers[0].mlp.act_fn

    def _norm(self, norm, x: torch.Tensor) -> torch.Tensor:
        """RMSNorm as transformers computes it (in float32, weight applied in the input dtype)."""

        if x.dtype == torch.float32:  # one fused op (the same values in float32)
            return F.rms_norm(x, norm.weight.shape, norm.weight, norm.variance_epsilon)
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
        return norm.weight * y.to(x.dtype)

    def _layers(self, h: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``h`` [B, T, hidden] at positions ``pos`` [B, T], written to the cache after what it
        holds; ``mask`` [B, 1, T, S'] the keys each query sees (S' = filled length after)."""

        B, T, _ = h.shape
        H, K, D = self.H, self.K, self.D
        cos, sin = self.cos[pos][:, None], self.sin[pos][:, None]  # [B, 1, T, D]
        start, end = self.length, self.length + T
        for i, layer in enumerate(self.body.layers):
            att = layer.self_attn
            x = self._norm(layer.input_layernorm, h)
            qkv = F.linear(x, self.qkv[i]).view(B, T, H + 2 * K, D).transpose(1, 2)
            qk = _rotate(qkv[:, : H + K], cos, sin)  # q and k rotated at once
            self.k[i, :, :, start:end] = qk[:, H:]
            self.v[i, :, :, start:end] = qkv[:, H + K :]
            o = F.scaled_dot_product_attention(
                qk[:, :H],
                self.k[i, :, :, :end],
                self.v[i, :, :, :end],
                attn_mask=mask,
                scale=att.scaling,
                enable_gqa=H != K,
            )
            h = h + att.o_proj(o.transpose(1, 2).reshape(B, T, H * D))
            gate, up = F.linear(
                self._norm(layer.post_attention_layernorm, h), self.gate_up[i]
            ).chunk(2, -1)
            h = h + layer.mlp.down_proj(self.act(gate) * up)
        self.length = end
        return self.model.lm_head(self._norm(self.body.norm, h[:, -1]))

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
