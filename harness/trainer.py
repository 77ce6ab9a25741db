"""Moved: the training loop is :mod:`sixblanks.harness.training` (kept importable during the move)."""

from .seeds import TRAIN_SEED_RANGE
from .training import RunResult, RunSettings, Trainer, TrainingError

__all__ = ["TRAIN_SEED_RANGE", "RunResult", "RunSettings", "Trainer", "TrainingError"]
