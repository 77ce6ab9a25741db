"""Named algorithms as presets of the six blanks, grouped by family (one module each).

Each preset states which variant it implements where frameworks disagree: std epsilon,
aggregation, dual clip, KL placement, GSPO sequence vs token form.

- ``supervised``: SFT on demonstrations and expert iteration (rejection-sampling fine-tuning);
- ``reinforce``: REINFORCE and its baselines (mean, leave-one-out, greedy, whitened returns);
- ``group_relative``: GRPO and the methods that change one of its blanks (Dr. GRPO, DAPO, GSPO,
  SAPO, Lite PPO);
- ``actor_critic``: PPO with a learned critic (token or turn level) and SAO;
- ``turn_credit``: credit per turn or step for multi-turn tasks (turn baselines, GiGPO,
  hierarchical, process reward models, PRIME, branching);
- ``rollout_anchored``: trust regions and caps on the ratio to the rollout policy (CISPO, DPPO,
  IcePop, ScaleRL);
- ``preference``: DPO on preference pairs.
"""

from __future__ import annotations

from ..errors import UnknownNameError  # lives in ..errors; importable from here as before
from . import (
    actor_critic,
    group_relative,
    preference,
    reinforce,
    rollout_anchored,
    supervised,
    turn_credit,
)
from .base import PRESETS, Preset, diff, get_preset, preset_names, register, resolve

for _family in (
    supervised,
    reinforce,
    group_relative,
    actor_critic,
    turn_credit,
    rollout_anchored,
    preference,
):
    for _p in _family.FAMILY:
        register(_p)

__all__ = [
    "PRESETS",
    "Preset",
    "UnknownNameError",
    "diff",
    "get_preset",
    "preset_names",
    "register",
    "resolve",
]
