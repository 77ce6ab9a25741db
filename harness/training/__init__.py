"""Training: one loop (:mod:`.loop`) over collectors (:mod:`.collectors`: where trajectories come
from) and objectives (:mod:`.objectives`: how a batch becomes optimizer steps), all charged to the
budget one way (:mod:`.meter`)."""

from .base import Collected, Prepared, RunResult, RunSettings, TrainingError
from .context import frozen_copy
from .loop import Trainer
from .meter import DeviceTimer, Meter

__all__ = [
    "Collected",
    "DeviceTimer",
    "Meter",
    "Prepared",
    "RunResult",
    "RunSettings",
    "Trainer",
    "TrainingError",
    "frozen_copy",
]
