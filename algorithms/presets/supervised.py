"""Supervised presets: fine-tuning on demonstrations, and expert iteration that distils the
policy's own best-of-N samples."""

from __future__ import annotations

from .base import Preset, blanks_of

FAMILY = (
    Preset(
        "sft",
        blanks_of(
            objective="sft",
            weight={"ratio": "none", "trust_region": "none"},
            advantage={"estimator": "unit"},
            normalization={"mode": "token-mean"},
            data={"source": "demonstrations"},
        ),
        "Supervised fine-tuning: NLL on demonstrated action tokens (w = 1, A = 1, Z = sum m).",
        ("Global token-mean over the optimizer-step batch, not a mean of micro-batch means.",),
    ),
    Preset(
        "rft",
        blanks_of(
            objective="sft",
            data={
                "source": "search",
                "search": {"mode": "best_of_n", "n": 8, "select": "best", "min_reward": 1.0},
            },
        ),
        "Expert iteration with rejection-sampling fine-tuning: each step, best-of-8 per prompt "
        "with the current policy, the best passing sample of each prompt distilled by SFT; repeat.",
        (
            "Every sample the search draws is launched and charged (search_tokens and the totals); "
            "the samples not selected are discarded as search_selection, so success filtering does "
            "not hide the selection cost (search.selection_cost: launched per selected token).",
            "Each step is one iteration: expert_iteration.iteration and .improvement (the change "
            "in the share of prompts the search solved) are logged.",
            "data.search.policy: initial distils the frozen initial policy's best-of-N instead.",
        ),
    ),
)
