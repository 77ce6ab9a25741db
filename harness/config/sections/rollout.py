"""The ``rollout`` section: sampling, the engine (with its vLLM options) and the mismatch lab."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_serializer, model_validator

from .base import Section


class VLLMConfig(Section):
    """Options of the colocated vLLM engine (``rollout.backend: vllm``)."""

    kv_cache_gib: int = Field(
        1, ge=1, description="CPU: KV-cache size in GiB (sets VLLM_CPU_KVCACHE_SPACE)."
    )
    gpu_memory_utilization: float = Field(
        0.3,
        gt=0,
        le=1,
        description="GPU: share of device memory vLLM may take (the trainer shares it).",
    )
    enforce_eager: bool = Field(True, description="No CUDA graphs / compilation: faster start-up.")


class MismatchConfig(Section):
    """A controlled train-inference mismatch (the mismatch lab, docs/guide/mismatch-lab.md): the
    rollout engine samples from a distribution other than the one the trainer scores, by as much as
    these settings say, so that rollout corrections (truncated IS, masking gates, ...) can be
    compared against a known mismatch. Off by default. Training rollouts only: the held-out
    evaluation, the greedy baseline and the contract check sample from the policy itself (on vLLM,
    whose engine has one dtype, a sampler dtype applies to every generation)."""

    sampler_dtype: Literal["float32", "bfloat16", "float16"] | None = Field(
        None,
        description="The dtype of the sampler's forward pass while the trainer keeps model.dtype: "
        "the HF engine samples with a copy of the policy cast to it (refreshed whenever the "
        "weights change); vLLM runs its engine in it. None: the model's own dtype.",
    )
    logit_noise: float = Field(
        0.0,
        ge=0,
        description="Standard deviation sigma of Gaussian noise N(0, sigma^2) added to every logit "
        "at every decode step, before temperature, top-k and top-p; drawn from the rollout's "
        "seeded generator (a run replays from its seed). HF backend only.",
    )
    top_p: float = Field(
        1.0,
        gt=0,
        le=1,
        description="A nucleus the sampler alone truncates to (renormalized; with "
        "rollout.top_p < 1 too, the smaller of the two), while the trainer scores the distribution "
        "rollout.top_p gives. 1: off.",
    )

    @property
    def active(self) -> bool:
        """Whether any setting is away from its default (no setting: the engine as without it)."""

        return self.sampler_dtype is not None or self.logit_noise > 0 or self.top_p < 1


class RolloutConfig(Section):
    backend: Literal["hf", "vllm"] = Field(
        "hf",
        description="hf: transformers sampling loop; vllm: colocated vllm.LLM whose weights are "
        "synced once per training step, after its update (all of its optimizer steps; needs "
        "`make vllm`).",
    )
    vllm: VLLMConfig = VLLMConfig()
    temperature: float = Field(
        1.0, gt=0, le=10, description="Sampling temperature for training rollouts."
    )
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0, description="0: off.")
    max_new_tokens: int = Field(12, gt=0, description="Per turn; the generation budget L_max.")
    max_prompt_tokens: int = Field(192, gt=0, description="Prompt plus observation history limit.")
    env_workers: int = Field(
        1,
        ge=1,
        le=256,
        description="Threads that run a turn's environment steps at once (what a step waits for "
        "itself, a tool call or a slow environment, then overlaps, as agentic frameworks run "
        "environments; verifier calls still run one at a time, so that each is counted exactly); "
        "1: one after another. For tasks whose environments are independent of each other (not "
        "with data.self_play).",
    )
    group_seeds: bool = Field(
        False,
        description="Sample each group with a generator of its own, seeded from the run's "
        "stream: a group's samples then depend neither on the other groups of its batch nor on "
        "the rank that makes it. A data-parallel run (model.parallel) always does; set here, a "
        "single-process run samples exactly as the data-parallel run does.",
    )
    group_size: int = Field(8, ge=1, description="Samples per prompt (G).")
    prompts_per_step: int = Field(8, ge=1, description="Prompts (groups) per optimizer-step batch.")
    micro_batch_size: int = Field(
        64, ge=1, description="Sequences per forward/backward micro-batch."
    )
    decode: Literal["auto", "transformers"] = Field(
        "auto",
        description="HF backend: auto decodes Llama-architecture policies through a static "
        "key/value cache in plain torch ops (the same logits, fewer Python operations per token); "
        "transformers: the model's own forward at every token.",
    )
    shared_prefix: bool = Field(
        True,
        description="Training forwards of Llama-architecture policies compute each prompt the "
        "batch's rows share once, then every row's continuation attending to it (the same "
        "log-probs and gradients to float rounding; less work with groups of samples). False: the "
        "model's own forward over every full sequence.",
    )
    skip_padding: bool = Field(
        True,
        description="Llama-architecture policies: the training forward computes the tokens after "
        "the shared prompts without their padding (a batch's answers differ in length: on the "
        "testbed half its positions are padding), and the decoder stops computing a row once it "
        "ended. The same log-probs, gradients and samples to float rounding; False: every row "
        "padded to the batch's longest, as before (to debug, or to measure what it saves).",
    )
    ignore_eos: bool = Field(
        False,
        description="Training rollouts generate max_new_tokens every turn, stopping at neither EOS "
        "nor the task's stop string (fixed-length generation: throughput benchmarks).",
    )
    skip_unused_forwards: bool = Field(
        True,
        description="No reference forward when no blank reads pi_ref (KL coefficients 0), and no "
        "separate pi_old forward when the update is exactly on-policy (one epoch of one minibatch, "
        "no KL in the reward, no off-policy masking or lag): the training forward's log-probs, "
        "detached, are pi_old. False: both forwards every step, as before (same gradients).",
    )
    reference_kl_metric: bool = Field(
        False,
        description="Log the KL to the reference (metric kl) even when no blank reads it: one "
        "reference forward per step.",
    )
    grad_noise_probe: bool = Field(
        False,
        description="Log the policy gradient's noise across steps: grad.sq_norm (the step's "
        "gradient, before clipping) and grad.noise_to_signal (trace of the gradients' covariance "
        "over the steps so far / the unbiased estimate of the squared norm of their mean, "
        "||mean||^2 - trace/n; absent while that estimate is <= 0). For comparing estimators on a "
        "frozen policy (optimizer.lr: 0); keeps two float64 copies of the gradient on the CPU. "
        "Critic-free policy-gradient arms only.",
    )
    chat_template: str = Field(
        "auto",
        description="auto: where the tokenizer has a chat template, prompts and observations are "
        "user messages rendered by it (the generation prompt added, the history extended as the "
        "template does); none: raw text; or the path of a Jinja template file to use instead.",
    )
    mismatch: MismatchConfig = Field(
        default_factory=MismatchConfig,
        description="A controlled sampler-trainer mismatch injected into training rollouts (the "
        "mismatch lab); off by default.",
    )

    @model_validator(mode="after")
    def _chat_template(self) -> RolloutConfig:
        t = self.chat_template
        if t not in ("auto", "none") and not Path(t).is_file():
            raise ValueError(f"chat_template: '{t}' is not 'auto', 'none' or an existing file")
        return self

    @model_serializer(mode="wrap")
    def _omit_defaults(self, handler):
        # the mismatch only where set: a default rollout section dumps (run spec and run id,
        # definition) as it did before the key existed
        out = handler(self)
        if not self.mismatch.active:
            out.pop("mismatch", None)
        return out
