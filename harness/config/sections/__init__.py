"""The experiment file's sections as typed models (every default lives in a field): the model, tasks
and judges, rollouts, the optimizer, the warm start, evaluation, arms, the executor and tracking.

One module a section (``model``, ``task``, ``rollout``, ``optimizer`` with the warm start,
``evaluation``, ``arms``, ``executor`` with tracking) on the shared ``base``; every name is
importable from here as well."""

from .arms import REWARD_FAULTS, ArmConfig, FaultConfig, RolloutOverride
from .base import Budget, PositiveFloat, Section
from .evaluation import EvalBeam, EvalConfig
from .executor import Credentialed, ExecutorConfig, TrackingConfig
from .model import LoraSpec, ModelConfig, ParallelConfig, TinyModelConfig
from .optimizer import OptimizerConfig, OptimizerOverride, WarmStartConfig
from .rollout import MismatchConfig, RolloutConfig, VLLMConfig
from .task import JudgeConfig, TaskConfig

__all__ = [
    "REWARD_FAULTS",
    "ArmConfig",
    "Budget",
    "Credentialed",
    "EvalBeam",
    "EvalConfig",
    "ExecutorConfig",
    "FaultConfig",
    "JudgeConfig",
    "LoraSpec",
    "MismatchConfig",
    "ModelConfig",
    "OptimizerConfig",
    "OptimizerOverride",
    "ParallelConfig",
    "PositiveFloat",
    "RolloutConfig",
    "RolloutOverride",
    "Section",
    "TaskConfig",
    "TinyModelConfig",
    "TrackingConfig",
    "VLLMConfig",
    "WarmStartConfig",
]
