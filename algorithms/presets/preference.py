"""Preference presets: DPO on pairs of the initial policy's scored rollouts."""

from __future__ import annotations

from .base import Preset, blanks_of

FAMILY = (
    Preset(
        "dpo",
        blanks_of(
            objective="dpo",
            weight={"ratio": "none", "trust_region": "none"},
            advantage={"estimator": "unit"},
            regularizer={"dpo_beta": 0.1},
            data={"source": "preference_pairs"},
        ),
        "DPO (Rafailov et al. 2023), offline on preference pairs built from scored rollouts of the "
        "initial policy; beta 0.1.",
        ("Sequence log-prob sums, not means (means would length-normalize).",),
    ),
)
