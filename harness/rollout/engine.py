"""Rollout engines: generate token ids with the log-probs of the distribution actually sampled from.

The interface is what the agent loop needs and nothing more, so that a vLLM
engine fits it unchanged: ``generate`` (batched, n samples per prompt, stop
strings), ``load_weights`` (sync after an optimizer step) and
``policy_version``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Literal

import torch

from ..errors import SixblanksError
from ..stopping import stop_point
from ..tasks.verify import CallStats
from .decoding import DecodeForward, RowEnds, TokenDraw, left_padded
from .fastdecode import supported


class RolloutError(SixblanksError):
    """The engine cannot sample (e.g. the policy's logits are NaN or infinite)."""


@dataclass(frozen=True)
class SamplerMismatch:
    """A controlled train-inference mismatch of the sampler (``rollout.mismatch``, the mismatch
    lab): what the engine samples from differs from what the trainer scores
    (:meth:`SamplingParams.scoring`), and the log-probs it reports are those of the distribution
    it actually sampled from."""

    sampler_dtype: str | None = None
    """The sampler's forward in this dtype (``float32``, ``bfloat16``, ``float16``); None: the
    model's own."""
    logit_noise: float = 0.0
    """sigma of N(0, sigma^2) noise added to every logit at every step, before temperature."""
    top_p: float = 1.0
    """A nucleus the sampler alone truncates to (the smaller of it and ``SamplingParams.top_p``)."""

    @classmethod
    def of(cls, cfg) -> SamplerMismatch | None:
        """From a ``rollout.mismatch`` section (None where it sets nothing: the plain sampler)."""

        if cfg is None or not cfg.active:
            return None
        return cls(cfg.sampler_dtype, float(cfg.logit_noise), float(cfg.top_p))

    @property
    def torch_dtype(self) -> torch.dtype | None:
        if self.sampler_dtype is None:
            return None
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
            self.sampler_dtype
        ]


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    """0: greedy (argmax); its log-probs are then those of the temperature-1 distribution."""
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 16
    stop: tuple[str, ...] = ()
    """Generation of a sequence ends after a token whose text contains one of these."""
    ignore_eos: bool = False
    """Keep sampling past EOS (fixed-length generation, e.g. for throughput benchmarks)."""
    env_workers: int = 1
    """Threads for a turn's environment steps (the agent loop's, not the sampler's)."""
    mismatch: SamplerMismatch | None = None
    """A controlled sampler-trainer mismatch (training rollouts of the mismatch lab); None: the
    sampler draws from the distribution :meth:`scoring` names, as the trainer scores it."""

    def scoring(self) -> tuple[float, int, float]:
        """(temperature, top_k, top_p) of the distribution log-probs refer to (the trainer's)."""

        if self.temperature == 0:
            return 1.0, 0, 1.0
        return self.temperature, self.top_k, self.top_p

    def sampler(self) -> tuple[float, int, float]:
        """(temperature, top_k, top_p) the sampler applies: :meth:`scoring`'s, with the
        mismatch's own nucleus where it sets one."""

        temp, top_k, top_p = self.scoring()
        if self.mismatch is not None and self.temperature != 0:
            top_p = min(top_p, self.mismatch.top_p)
        return temp, top_k, top_p


@dataclass
class Generation:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: Literal["stop", "eos", "length"]
    text: str = ""

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


@dataclass
class EngineStats(CallStats):
    generated_tokens: int = 0
    prompt_tokens: int = 0
    extra: dict = field(default_factory=dict)

    def record(self, prompts: list[list[int]], n: int, result, seconds: float) -> None:
        """Count one ``generate`` call: ``n`` samples of each prompt, ``result[i][j]``
        Generations."""

        self.seconds += seconds
        self.calls += 1
        self.prompt_tokens += n * sum(len(p) for p in prompts)
        self.generated_tokens += sum(len(g.token_ids) for r in result for g in r)


class RolloutEngine(ABC):
    """Generates continuations and reports the weights version that produced them."""

    policy_version: int = 0

    @abstractmethod
    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        n: int = 1,
        generator: torch.Generator | None = None,
    ) -> list[list[Generation]]:
        """``n`` continuations per prompt: ``result[i][j]`` is sample j of prompt i."""

    @abstractmethod
    def load_weights(self, state_dict: dict[str, torch.Tensor] | None = None) -> None:
        """Take new policy weights (None: the shared model changed in place); advances
        policy_version."""


class HFEngine(RolloutEngine):
    """Hugging Face transformers backend: batched, left-padded, KV-cached sampling loop."""

    def __init__(
        self,
        model,
        tokenizer,
        batch_size: int = 256,
        decode: str = "auto",
        skip_padding: bool = True,
    ):
        self.model, self.tokenizer = model, tokenizer
        self.batch_size = batch_size
        self.decode = decode
        """auto: :class:`LlamaDecoder` where it reproduces the model; transformers: its forward."""
        self.skip_padding = skip_padding
        """Whether :class:`LlamaDecoder` stops computing the rows that ended."""
        self.policy_version = 0
        self.stats = EngineStats()
        self._stop_cache: dict[tuple[str, ...], torch.Tensor] = {}
        self._cast = None  # the policy cast to a mismatch's sampler dtype (see _sampling_model)
        self._cast_of: tuple | None = None  # (dtype, policy_version) its weights were copied at

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def fast(self) -> bool:
        return self.decode == "auto" and supported(self.model)

    def load_weights(self, state_dict: dict[str, torch.Tensor] | None = None) -> None:
        if state_dict is not None:
            self.model.load_state_dict(state_dict)
        self.policy_version += 1
        self._cast_of = None  # the weights changed: a cast copy is refreshed before it samples

    def _sampling_model(self, mismatch: SamplerMismatch | None):
        """The model the sampler runs: the policy itself, or (a mismatch's ``sampler_dtype`` other
        than the policy's) a frozen copy cast to that dtype, whose weights are copied from the
        policy again once they may have changed (a weight load, or another policy version: a
        lagged engine sets the version it loaded)."""

        dtype = mismatch.torch_dtype if mismatch is not None else None
        if dtype is None or dtype == next(self.model.parameters()).dtype:
            return self.model
        key = (dtype, self.policy_version)
        # ordinary tensors, not inference ones (generate's mode): the copy outlives the call
        with torch.inference_mode(False), torch.no_grad():
            if self._cast is None or next(self._cast.parameters()).dtype != dtype:
                import copy

                self._cast = copy.deepcopy(self.model).to(dtype)
                for p in self._cast.parameters():
                    p.requires_grad_(False)
                    p.grad = None
            elif self._cast_of != key:
                self._cast.load_state_dict(self.model.state_dict())  # copied and cast per tensor
        self._cast.eval()
        self._cast_of = key
        return self._cast

    def _stop_ids(self, stop: tuple[str, ...]) -> torch.Tensor:
        """Boolean [V]: tokens whose text contains a stop string (computed once per stop set)."""

        if stop not in self._stop_cache:
            V = self.model.get_output_embeddings().weight.shape[0]
            mask = torch.zeros(V, dtype=torch.bool)
            if stop:
                vocab_size = min(V, len(self.tokenizer))
                texts = self.tokenizer.batch_decode([[i] for i in range(vocab_size)])
                for i, t in enumerate(texts):
                    if any(s in t for s in stop):
                        mask[i] = True
            self._stop_cache[stop] = mask.to(self.device)
        return self._stop_cache[stop]

    # inference mode, not only no_grad: the decode step's many small operations skip autograd's
    # bookkeeping (version counters, view tracking; benchmarks/inference_mode.py compares the two);
    # nothing it makes leaves as a tensor (each Generation holds plain lists)
    @torch.inference_mode()
    def generate(self, prompts, params, n=1, generator=None):
        import time

        flat = [p for p in prompts for _ in range(n)]
        out: list[Generation] = []
        t0 = time.perf_counter()
        for s in range(0, len(flat), self.batch_size):
            out += self._generate_batch(flat[s : s + self.batch_size], params, generator)
        result = [out[i * n : (i + 1) * n] for i in range(len(prompts))]
        self.stats.record(prompts, n, result, time.perf_counter() - t0)
        return result

    def _generate_batch(
        self, prompts: list[list[int]], params: SamplingParams, generator
    ) -> list[Generation]:
        """One batch of prompts sampled together, token by token, until every row ended or
        ``max_new_tokens``: each row's tokens, log-probs and why it ended."""

        was_training = self.model.training
        self.model.eval()
        model = self._sampling_model(params.mismatch)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids, attn = left_padded(prompts, pad, self.device)
        stop_mask = self._stop_ids(tuple(params.stop))
        draw = TokenDraw(params, generator)
        eos = self.tokenizer.eos_token_id
        rows = RowEnds(len(prompts), params, pad, eos, stop_mask, self.device)
        forward = DecodeForward(model, ids, attn, params.max_new_tokens, self.fast)
        for step in range(params.max_new_tokens):
            stop_point("generation")  # Ctrl-C: between decode steps (harness/stopping.py)
            nxt, lp = draw(forward.logits(step))
            if rows.take(step, nxt, lp):
                break
            forward.advance(nxt, rows.finished if rows.can_stop and self.skip_padding else None)
        self._check_finite(rows.logps)
        rows.finish()
        if was_training:
            self.model.train()
        return self._generations(rows.tokens, rows.logps, rows.lengths, rows.reason)

    def _check_finite(self, logps: torch.Tensor) -> None:
        """NaN or +inf logits make the sampled token's log-prob NaN: checked once, after the loop
        (a check each token costs a synchronisation and two operations a step). ``logps [B, N]``."""

        bad = ~torch.isfinite(logps)
        if bool(bad.any()):
            step = int(bad.any(0).float().argmax())
            raise RolloutError(
                f"the policy produced non-finite logits at generation step {step} (version "
                f"{self.policy_version}); its weights have diverged (lower optimizer.lr)"
            )

    def _generations(self, tokens, logps, lengths, reason) -> list[Generation]:
        """Each row's first ``lengths`` tokens ``[B, N]`` and log-probs, why it ended (``reason``:
        0 length, 1 stop string, 2 EOS) and its text."""

        names = {0: "length", 1: "stop", 2: "eos"}
        rows = zip(tokens.tolist(), logps.tolist(), lengths.tolist(), reason.tolist())
        return [
            Generation(
                toks[:n],
                lps[:n],
                names[why],
                self.tokenizer.decode(toks[:n], skip_special_tokens=True),
            )
            for toks, lps, n, why in rows
        ]
