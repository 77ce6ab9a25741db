"""Names of the ledger counters (../shared/DESIGN.md, "The ledger").

Pure data: no torch, no I/O. A budget is a limit on any of these.
"""

from __future__ import annotations

COUNTERS: dict[str, str] = {
    "prompt_tokens": "tokens of prompts and observations fed to the policy for training rollouts",
    "launched_tokens": "every token sampled for training, including those later discarded",
    "accepted_tokens": "tokens that entered a gradient",
    "replayed_tokens": "tokens trained on again from a replay buffer (launched and accepted once)",
    "discarded_tokens": "launched tokens that did not enter a gradient (sum over reasons)",
    "rollouts_launched": "episodes started for training",
    "rollouts_accepted": "episodes that entered a gradient",
    "env_steps": "environment step() calls",
    "search_tokens": "tokens sampled by search (best-of-N, beam, tree); also in launched_tokens",
    "search_env_steps": "environment steps taken by search; also in env_steps",
    "search_verifier_calls": "verifier calls made by search; also in verifier_calls",
    "verifier_calls": "reward/verifier evaluations",
    "judge_calls": "LLM-judge calls",
    "optimizer_steps": "optimizer updates",
    "device_seconds": "measured device time: GPU time on CUDA, process CPU time on CPU",
    "wall_seconds": "elapsed wall-clock time",
}

DISCARD_REASONS: tuple[str, ...] = (
    "dynamic_sampling",
    "overlong_filter",
    "staleness",
    "masking",
    "failed",
    "baseline",
    "dis",
    "unconsumed",
    "search_selection",
)
"""Why launched tokens did not enter a gradient. "failed": a task or verifier failure; "baseline":
ReMax's greedy rollouts (a cost of the estimator, never trained on); "staleness": samples past the
bounded-staleness limit; "masking": tokens an off-policy gate or a masked truncated-IS form dropped;
"dis": tokens outside SAO's DIS band; "unconsumed": rounds a concurrent collector launched that
were never trained on (still queued when the run ended, or made after the checkpoint a killed
trainer resumed from); "search_selection": samples a search drew and did not select (the cost of
selection that success filtering would otherwise hide)."""


def counter_names() -> list[str]:
    return list(COUNTERS)
