"""A static-KV-cache decoder for Llama-architecture policies.

transformers' generic forward spends most of a tiny model's decode step in Python: cache objects,
a 4-D mask rebuilt at every token, keyword plumbing. :class:`LlamaDecoder` runs the same model
(its own norms and weights; q/k/v and gate/up concatenated once per call) through a preallocated
key/value cache in plain torch ops, about 30 a token for a two-layer model (see
:class:`LlamaDecoder`). Its logits equal the model's own forward (tests/test_rollout.py checks them
to 1e-5, prefill and every step), so the trajectory contract's log-prob check holds unchanged.

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
        and not getattr(c, "mlp_bias", False)
        and rope.get("rope_type", "default") == "default"
        and getattr(model.model, "rotary_emb", None) is not None
    )


class LlamaDecoder:
    """Prefill a left-padded batch, then one token per :meth:`step`; returns last-position logits.

    Each distinct prompt of the batch is prefilled once (a GRPO batch repeats every prompt G
    times) and its keys and values copied to its rows. Decoding then runs per token:

    - q and k come out of the projection with each head's rotary pairs ``(j, j + D/2)`` adjacent
      (the rows of ``q_proj``/``k_proj`` permuted alike, which leaves every ``q . k`` unchanged),
      so the rotation is one complex product;
    - keys are cached transposed ``[B*K, D, S]`` and values ``[B*K, S, D]``; attention is one
      ``baddbmm`` with a fixed additive mask over the whole cache (0 on real positions, -inf on
      padding and on positions not yet generated) and one ``bmm``: static shapes, no per-step mask,
      and the H/K query heads of a key/value head as the rows of one product (grouped-query
      attention without repeating keys);
    - the residual adds are fused into the output projections (``addmm``).

    Args:
        model: a ``LlamaForCausalLM`` (see :func:`supported`), in eval mode.
        ids, attn: ``[B, L]`` left-padded prompts and their attention mask (1 on real tokens).
        max_new: the most tokens :meth:`step` will be called for.
    """

    def __init__(self, model, ids: torch.Tensor, attn: torch.Tensor, max_new: int):
        c = model.config
        self.model, self.body = model, model.model
        self.H, self.K = c.num_attention_heads, c.num_key_value_heads
        H, K = self.H, self.K
        D = self.D = getattr(c, "head_dim", None) or c.hidden_size // H
        B, L = ids.shape
        S = L + max_new
        dev, dtype = ids.device, next(model.parameters()).dtype
        n = len(self.body.layers)
        # the cache and the attention scores in float32 also for a 16-bit model (as SDPA's kernels
        # accumulate them): a bfloat16 score is off by ~0.05 at a logit of 10
        acc = self.acc = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
        self.kt = torch.zeros((n, B * K, D, S), dtype=acc, device=dev)
        self.v = torch.zeros((n, B * K, S, D), dtype=acc, device=dev)
        self.bias = torch.full((B * K, 1, S), float("-inf"), dtype=acc, device=dev)
        self.bias[:, 0, :L] = torch.where(attn.bool(), 0.0, float("-inf")).repeat_interleave(K, 0)
        self.pos = (attn.cumsum(-1) - 1).clamp(min=0)  # [B, L] positions of the prompt tokens
        self.length = 0  # cache entries filled
        self.ids, self.attn = ids, attn
        half = D // 2
        # each head's dims reordered to (0, D/2, 1, D/2 + 1, ...): rotary pairs adjacent
        pairs = torch.stack([torch.arange(half), torch.arange(half) + half], 1).reshape(-1)
        with torch.no_grad():
            self.qkv, self.gate_up, self.o_t, self.down_t, self.norms = [], [], [], [], []
            for layer in self.body.layers:
                # per layer, what each token's step reads (no module call or attribute chain)
                self.o_t.append(layer.self_attn.o_proj.weight.t())
                self.down_t.append(layer.mlp.down_proj.weight.t())
                self.norms.append((layer.input_layernorm, layer.post_attention_layernorm))
                a = layer.self_attn
                w = a.q_proj.weight
                wq = w.view(H, D, -1)[:, pairs].reshape(H * D, -1) * a.scaling
                wk = a.k_proj.weight.view(K, D, -1)[:, pairs].reshape(K * D, -1)
                self.qkv.append(torch.cat([wq, wk, a.v_proj.weight]))
                self.gate_up.append(
                    torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight])
                )
            table = torch.arange(S, device=dev)[None]
            cos, sin = self.body.rotary_emb(torch.zeros(1, dtype=torch.float32, device=dev), table)
        # [S, D/2] complex: cos + i sin of each pair's angle (the table repeats them per half)
        self.turn = torch.complex(cos[0, :, :half], sin[0, :, :half])
        self.act = self.body.layers[0].mlp.act_fn
        self.layer_kt = list(self.kt)  # [B*K, D, S] per layer
        self.layer_v = list(self.v)  # [B*K, S, D] per layer
        self.embed = self.body.embed_tokens.weight
        self.B = B
        self.live: torch.Tensor | None = None
        """``[b]``: the batch rows the cache still holds, in its order (None: all ``B``)."""

    def drop(self, ended: torch.Tensor) -> None:
        """Rows that ended (``ended [B]`` bool) leave the cache once they are a quarter of it: the
        later steps compute only the rows still going (a batch's answers end at very different
        lengths). Each kept row's arithmetic is its own, so its logits stay those of the full
        batch to float rounding (a matrix product's rounding may depend on its row count)."""

        live = self.live if self.live is not None else torch.arange(self.B, device=ended.device)
        keep = (~ended[live]).nonzero().squeeze(1)  # [b'] positions in the cache
        if keep.numel() == 0 or 4 * keep.numel() > 3 * live.numel():
            return
        K = self.K

        def rows(x: torch.Tensor, dim: int) -> torch.Tensor:  # dim: the B*K axis
            return x.unflatten(dim, (-1, K)).index_select(dim, keep).flatten(dim, dim + 1)

        self.kt, self.v, self.bias = rows(self.kt, 1), rows(self.v, 1), rows(self.bias, 0)
        self.layer_kt, self.layer_v = list(self.kt), list(self.v)
        self.pos = self.pos.index_select(0, keep)
        self.live = live.index_select(0, keep)

    def _norm(self, norm, x: torch.Tensor) -> torch.Tensor:
        """RMSNorm of ``x`` [..., hidden] as transformers computes it (in float32, the weight
        applied in the input dtype)."""

        if x.dtype == torch.float32:  # one fused op (the same values in float32)
            w = norm.weight
            return torch.rms_norm(x, w.shape, w, norm.variance_epsilon)
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
        return norm.weight * y.to(x.dtype)

    def _head(self, h: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, V]`` of the last hidden states ``h`` [B, hidden]: final norm, then head
        (the model's own head module: ``model.fp32_lm_head`` computes it in float32)."""

        return self.model.lm_head(self._norm(self.body.norm, h))

    def _rotate_pairs(self, qk: torch.Tensor, turn: torch.Tensor) -> torch.Tensor:
        """``qk`` [..., heads, D] (pairs adjacent) rotated by ``turn`` [..., 1, D/2] (complex),
        computed in float32 and returned in ``qk``'s dtype."""

        z = torch.view_as_complex(qk.float().unflatten(-1, (-1, 2)))
        return torch.view_as_real(z * turn).flatten(-2).to(qk.dtype)

    @torch.no_grad()
    def prefill(self) -> torch.Tensor:
        """Logits ``[B, V]`` after the prompts, each distinct prompt computed once. A padding
        query sees every earlier position (its output is never used; a row with no key at all
        would make NaN that later layers' padding keys and values would carry)."""

        B, L = self.ids.shape
        H, K, D = self.H, self.K, self.D
        uniq, row = torch.unique(torch.cat([self.ids, self.attn], 1), dim=0, return_inverse=True)
        ids, attn = uniq[:, :L], uniq[:, L:]  # [U, L] each; row [B]: each row's prompt
        U = ids.shape[0]
        causal = torch.ones((L, L), dtype=torch.bool, device=ids.device).tril()
        real = attn.bool()
        mask = (causal[None] & (real[:, None, :] | ~real[:, :, None]))[:, None]  # [U, 1, L, L]
        turn = self.turn[(attn.cumsum(-1) - 1).clamp(min=0)][:, :, None]  # [U, L, 1, D/2]
        h = self.body.embed_tokens(ids)  # [U, L, hidden]
        for i, layer in enumerate(self.body.layers):
            x = self._norm(layer.input_layernorm, h)
            qkv = F.linear(x, self.qkv[i]).view(U, L, H + 2 * K, D)
            qk = self._rotate_pairs(qkv[:, :, : H + K], turn).transpose(1, 2)  # [U, H + K, L, D]
            k, v = qk[:, H:], qkv[:, :, H + K :].transpose(1, 2)  # [U, K, L, D]
            o = F.scaled_dot_product_attention(
                qk[:, :H], k, v, attn_mask=mask, scale=1.0, enable_gqa=H != K
            )
            self.kt[i, :, :, :L] = k[row].transpose(-1, -2).reshape(B * K, D, L)
            self.v[i, :, :L] = v[row].reshape(B * K, L, D)
            h = h + layer.self_attn.o_proj(o.transpose(1, 2).reshape(U, L, H * D))
            x = self._norm(layer.post_attention_layernorm, h)
            gate, up = F.linear(x, self.gate_up[i]).chunk(2, -1)
            h = h + layer.mlp.down_proj(self.act(gate) * up)
        self.length = L
        return self._head(h[:, -1])[row]

    @torch.no_grad()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, V]`` after appending ``tokens`` [B]; a row :meth:`drop` took out of the
        cache gets logits 0 (what it samples is never read)."""

        if self.live is not None:
            tokens = tokens.index_select(0, self.live)
        B = tokens.shape[0]
        H, K, D = self.H, self.K, self.D
        t = self.length
        self.bias[:, :, t] = 0.0
        pos = self.pos[:, -1] + 1 + (t - self.pos.shape[1])  # [B]
        turn = self.turn[pos][:, None]  # [B, 1, D/2]
        h = F.embedding(tokens, self.embed)  # [B, hidden]
        for i in range(len(self.qkv)):
            norm1, norm2 = self.norms[i]
            kt, v = self.layer_kt[i], self.layer_v[i]
            qkv = F.linear(self._norm(norm1, h), self.qkv[i]).view(B, H + 2 * K, D)
            qk = self._rotate_pairs(qkv[:, : H + K], turn)  # [B, H + K, D]
            kt[:, :, t] = qk[:, H:].reshape(B * K, D)
            v[:, t] = qkv[:, H + K :].reshape(B * K, D)
            q = qk[:, :H].reshape(B * K, H // K, D).to(self.acc)
            scores = torch.baddbmm(self.bias, q, kt)  # [B*K, H/K, S]
            o = torch.bmm(scores.softmax(-1), v).view(B, H * D).to(h.dtype)
            h = torch.addmm(h, o, self.o_t[i])
            gate, up = F.linear(self._norm(norm2, h), self.gate_up[i]).chunk(2, -1)
            h = torch.addmm(h, self.act(gate) * up, self.down_t[i])
        self.length = t + 1
        logits = self._head(h)
        if self.live is None:
            return logits
        return logits.new_zeros((self.B, logits.shape[-1])).index_copy_(0, self.live, logits)
