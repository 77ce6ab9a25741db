"""The experiment file, parsed into typed, validated objects.

Every default lives in the models' fields (``sections``: the model, tasks, rollouts, optimizer, warm
start, evaluation, arms, executor, tracking; ``studies``: the ladder and the sweep; ``experiment``:
the whole file). :func:`load_config` (``bases``, with ``loading``) collects every problem at once
(YAML syntax, unknown keys, wrong types, unknown names, and settings whose runs cannot work:
``checks``) and raises :class:`~sixblanks.harness.errors.ConfigError` with one
``key.path: message`` line each.
"""

from .bases import load_config
from .experiment_config import PRETRAINED_LR, ExperimentConfig
from .loading import parse_yaml, resolved_dict, validate_mapping
from .sections import (
    ArmConfig,
    EvalConfig,
    ExecutorConfig,
    FaultConfig,
    JudgeConfig,
    ModelConfig,
    OptimizerConfig,
    RolloutConfig,
    RolloutOverride,
    TaskConfig,
    TinyModelConfig,
    TrackingConfig,
)
from .studies import LadderConfig, SweepConfig

__all__ = [
    "PRETRAINED_LR",
    "ArmConfig",
    "EvalConfig",
    "ExecutorConfig",
    "ExperimentConfig",
    "FaultConfig",
    "JudgeConfig",
    "LadderConfig",
    "ModelConfig",
    "OptimizerConfig",
    "RolloutConfig",
    "RolloutOverride",
    "SweepConfig",
    "TaskConfig",
    "TinyModelConfig",
    "TrackingConfig",
    "load_config",
    "parse_yaml",
    "resolved_dict",
    "validate_mapping",
]
