"""The HF engine's decode loop, one piece a class: the forward a decode step at a time
(:class:`DecodeForward`), the token drawn from its logits (:class:`TokenDraw`), each row's tokens
and end (:class:`RowEnds`); the left padding of a batch of prompts, and the draw of a token by
inversion of the cumulative distribution (:func:`sample_categorical`).

Shapes: ``B`` rows, ``L`` prompt length (left-padded), ``V`` vocabulary, ``N`` new tokens. A
``params`` is the engine's ``SamplingParams`` (not imported here: the engine imports this module).
"""

from __future__ import annotations

import torch

from sixblanks.algorithms.logprobs import process_logits

from .fastdecode import LlamaDecoder


def _cache_kwarg(model) -> str:
    """transformers 5.2x renamed ``past_key_values`` to ``cache``; support both."""

    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class DecodeForward:
    """The sampler's forward, one decode step at a time: :class:`LlamaDecoder`'s static cache
    (``fast``: the same logits in plain torch ops), or the model's own forward with its KV cache,
    the attention mask ``[B, L + step]`` and the next token's positions ``[B, 1]``."""

    def __init__(self, model, ids: torch.Tensor, attn: torch.Tensor, max_new: int, fast: bool):
        self.model, self.attn = model, attn
        self.ids = ids
        """``[B, L]`` the left-padded prompts, then ``[B, 1]`` the last token sampled."""
        self.pos = (attn.cumsum(-1) - 1).clamp(min=0)
        self.past = None
        self.cache_kw = _cache_kwarg(model)
        self.fast = LlamaDecoder(model, ids, attn, max_new) if fast else None

    def logits(self, step: int) -> torch.Tensor:
        """The next token's logits ``[B, V]``: the prompts' at step 0, then the last token's."""

        if self.fast is not None:
            return self.fast.prefill() if step == 0 else self.fast.step(self.ids[:, 0])
        res = self.model(
            input_ids=self.ids,
            attention_mask=self.attn,
            position_ids=self.pos,
            use_cache=True,
            logits_to_keep=1,
            **{self.cache_kw: self.past},
        )
        self.past = getattr(res, self.cache_kw)
        return res.logits[:, -1, :]

    def advance(self, nxt: torch.Tensor, ended: torch.Tensor | None = None) -> None:
        """The tokens ``nxt [B]`` sampled this step become the next step's input; rows ``ended``
        ``[B]`` (bool; None: none) need no more logits."""

        self.ids = nxt[:, None]
        if self.fast is not None and ended is not None:
            self.fast.drop(ended)
        if self.fast is None:
            ones = torch.ones((nxt.shape[0], 1), dtype=self.attn.dtype, device=self.attn.device)
            self.attn = torch.cat([self.attn, ones], dim=1)
            self.pos = self.pos[:, -1:] + 1


class TokenDraw:
    """One token a row from a step's logits ``[B, V]``: the mismatch lab's logit noise first (from
    the rollout's generator), then the sampler's temperature, top-k and top-p; the argmax at
    temperature 0."""

    def __init__(self, params, generator):
        mismatch = params.mismatch
        self.noise = mismatch.logit_noise if mismatch is not None else 0.0
        self.temp, self.top_k, self.top_p = params.sampler()
        self.greedy = params.temperature == 0
        self.generator = generator

    def __call__(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the tokens drawn ``[B]``, their log-probs ``[B]`` under the distribution sampled)."""

        if self.noise > 0:
            g = self.generator
            where = g.device if g is not None else logits.device
            eps = torch.randn(logits.shape, device=where, generator=g)
            logits = logits.float() + self.noise * eps.to(logits.device)
        z = process_logits(logits, self.temp, self.top_k, self.top_p)
        logp = torch.log_softmax(z, dim=-1)
        nxt = logits.argmax(-1) if self.greedy else sample_categorical(logp, self.generator)
        return nxt, logp.gather(-1, nxt[:, None]).squeeze(-1)


class RowEnds:
    """Each row's sampled tokens and their log-probs (``[B, N]``, pad and 0 past its end), how
    many it took (``lengths [B]``) and why it ended (``reason [B]``: 0 length, 1 stop string,
    2 EOS). Without EOS or a stop string every row takes every token (``can_stop`` False)."""

    def __init__(self, B: int, params, pad: int, eos, stop_mask, dev):
        n = params.max_new_tokens
        self.tokens = torch.zeros((B, n), dtype=torch.long, device=dev)
        self.logps = torch.zeros((B, n), dtype=torch.float32, device=dev)
        self.finished = torch.zeros(B, dtype=torch.bool, device=dev)
        self.reason = torch.zeros(B, dtype=torch.long, device=dev)
        self.lengths = torch.zeros(B, dtype=torch.long, device=dev)
        self.pad, self.stop_mask, self.n = pad, stop_mask, n
        self.eos = eos if eos is not None and not params.ignore_eos else None
        self.can_stop = self.eos is not None or bool(stop_mask.any())

    def take(self, step: int, nxt: torch.Tensor, lp: torch.Tensor) -> bool:
        """Record step ``step``'s tokens ``nxt [B]`` and log-probs ``lp [B]`` for the rows still
        going; whether every row has ended."""

        if not self.can_stop:  # fixed length: every row takes every token
            self.tokens[:, step], self.logps[:, step] = nxt, lp
            return False
        active = ~self.finished
        self.tokens[:, step] = torch.where(active, nxt, torch.full_like(nxt, self.pad))
        self.logps[:, step] = torch.where(active, lp, torch.zeros_like(lp))
        self.lengths += active.long()
        is_stop = self.stop_mask[nxt]
        if self.eos is not None:
            is_eos = nxt == self.eos
            self.reason = torch.where(active & is_eos, torch.full_like(self.reason, 2), self.reason)
            is_stop = is_stop & ~is_eos
            self.finished = self.finished | is_eos
        self.reason = torch.where(active & is_stop, torch.full_like(self.reason, 1), self.reason)
        self.finished = self.finished | is_stop
        return bool(self.finished.all())

    def finish(self) -> None:
        """After the last step: a fixed-length row took all ``max_new_tokens``."""

        if not self.can_stop:
            self.lengths[:] = self.n


def left_padded(prompts: list[list[int]], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompts left-padded to the longest with ``pad``: token ids and attention mask, both
    ``[B, L]`` on ``device``."""

    length = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), length), pad, dtype=torch.long)
    attn = torch.zeros((len(prompts), length), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, length - len(p) :] = torch.tensor(p, dtype=torch.long)
        attn[i, length - len(p) :] = 1
    return ids.to(device), attn.to(device)


def sample_categorical(logp: torch.Tensor, generator=None) -> torch.Tensor:
    """One draw per row of the distribution ``exp(logp)`` [B, V], by inversion: the first token
    whose cumulative probability (float64) exceeds ``u`` times the row's total, ``u ~ U[0, 1)``
    from ``generator``. One uniform a row, where the exponential race ``torch.multinomial`` runs
    (argmax p / q, q ~ Exp(1)) draws one exponential per token: at a 64 x 101 step that draw cost
    125 us against about 30 for this. Zero-probability tokens (``-inf``: filtered by top-k/top-p)
    are never drawn; tests/test_rollout.py checks the frequencies against the probabilities.
    Returns the tokens ``[B]``."""

    wide = torch.float32 if logp.device.type == "mps" else torch.float64  # MPS has no float64
    cdf = logp.to(wide).exp_().cumsum_(-1)  # [B, V]
    u = torch.rand((cdf.shape[0], 1), dtype=cdf.dtype, device=cdf.device, generator=generator)
    nxt = torch.searchsorted(cdf, u.mul_(cdf[:, -1:]), right=True)[:, 0]
    return nxt.clamp_(max=cdf.shape[-1] - 1)  # a NaN row (caught after the loop) stays in range
