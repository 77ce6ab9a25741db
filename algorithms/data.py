"""The data blank: group filtering with an attempt census, a pass-rate curriculum that skips
prompts before launch, overlong shaping and filtering, and epochs x minibatches over a rollout
buffer. Pure torch / python, no I/O."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch


def overlong_penalty(
    lengths: torch.Tensor, l_max: int, cache: int, factor: float = 1.0
) -> torch.Tensor:
    """DAPO soft overlong punishment R_length ``[B]`` for response lengths ``[B]``.

    0 if |y| <= L_max - L_cache; ((L_max - L_cache) - |y|) / L_cache * factor if |y| <= L_max;
    -factor beyond L_max.
    """

    lengths = lengths.double()
    start = float(l_max - cache)
    pen = torch.where(lengths <= start, torch.zeros_like(lengths), (start - lengths) / cache)
    pen = torch.where(lengths > l_max, torch.full_like(lengths, -1.0), pen)
    return pen * factor


def potential_shaping(
    turn_rewards: torch.Tensor, potentials: torch.Tensor, gamma: float
) -> torch.Tensor:
    """Potential-based shaping (Ng, Harada, Russell 1999): turn k's reward becomes
    r_k + gamma Phi(s_{k+1}) - Phi(s_k). It leaves the optimal policy unchanged; the discounted sum
    of the added terms over an episode is gamma^K Phi(s_K) - Phi(s_0), i.e. -Phi(s_0) when the end
    state has Phi = 0.

    Args:
        turn_rewards: ``[B, K]``.
        potentials: ``[B, K + 1]``: Phi of the state before each turn and, at the index after an
            episode's last turn, of its end state (0 for a terminal state); 0 past the end.
        gamma: the learner's discount per environment step.

    Returns:
        ``[B, K]`` shaped turn rewards (float64); turns past an episode's end stay 0.
    """

    phi = potentials.double()
    K = turn_rewards.shape[1]
    if phi.shape[1] != K + 1:
        raise ValueError(
            f"potentials: expected [B, {K + 1}] (one more than turns), got {tuple(phi.shape)}"
        )
    return turn_rewards.double() + gamma * phi[:, 1:] - phi[:, :-1]


def overlong_filter_mask(mask: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """m = 0 on every token of a truncated (no stop/EOS) sample. ``[B, T]``."""

    return mask * (~truncated.bool()).to(mask.dtype)[:, None]


def group_verdicts(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    band: tuple[float, float] | None = None,
) -> dict[int, str]:
    """Per group id: "keep" (reward std > 0) or why it is dropped: "all_correct" (all equal to the
    group max >= 1... i.e. all at the top reward), "all_wrong" (all <= 0) or "zero_variance"; with
    ``band = (low, high)`` (PRIME's accuracy filter), a varied group whose mean reward is outside
    [low, high] is dropped as "accuracy"."""

    out: dict[int, str] = {}
    for g in torch.unique(group_ids).tolist():
        r = rewards[group_ids == g].double()
        if r.numel() > 1 and bool((r != r[0]).any()):
            inside = band is None or band[0] <= float(r.mean()) <= band[1]
            out[g] = "keep" if inside else "accuracy"
        elif float(r[0]) <= 0:
            out[g] = "all_wrong"
        elif float(r[0]) >= 1:
            out[g] = "all_correct"
        else:
            out[g] = "zero_variance"
    return out


@dataclass
class SamplingCensus:
    """What dynamic sampling did in one optimizer step: every launched group is accounted for.

    ``groups_launched == groups_kept + sum(groups_dropped.values())`` always holds.
    """

    rounds: int = 0
    prompts_sampled: int = 0
    groups_launched: int = 0
    groups_varied: int = 0
    """Launched groups whose rewards are not all equal, counted before any filtering (the
    trainable-group fraction is groups_varied / groups_launched, for every arm)."""
    groups_kept: int = 0
    groups_dropped: dict[str, int] = field(
        default_factory=lambda: {
            "all_correct": 0,
            "all_wrong": 0,
            "zero_variance": 0,
            "accuracy": 0,
            "surplus": 0,
        }
    )
    responses_launched: int = 0
    responses_accepted: int = 0
    tokens_launched: int = 0
    tokens_accepted: int = 0
    cap_hit: bool = False
    prompts_retired: int = 0
    """Prompts retired from later sampling by this step (no-positive-resampling)."""
    prompts_skipped: dict[str, int] | None = None
    """Prompts drawn and skipped before launch by the curriculum, by the verdict of their streak
    (``all_correct``, ``all_wrong``); never launched, so in no other count. None: no curriculum
    (the key is then left out of the record, as before it existed)."""

    def as_dict(self) -> dict:
        out = asdict(self)
        if self.prompts_skipped is None:
            del out["prompts_skipped"]
        return out

    @property
    def trainable_group_frac(self) -> float | None:
        """Share of launched groups with unequal rewards (None before any group was launched)."""

        return self.groups_varied / self.groups_launched if self.groups_launched else None

    def balanced(self) -> bool:
        return self.groups_launched == self.groups_kept + sum(self.groups_dropped.values()) and (
            self.responses_accepted <= self.responses_launched
            and self.tokens_accepted <= self.tokens_launched
        )


class DynamicSampler:
    """DAPO dynamic sampling: keep groups with reward std > 0 until ``target_groups`` are kept or
    ``max_rounds`` generation rounds are spent; surplus groups of the last round are trimmed.

    The caller generates each round and passes, per group, its id, verdict inputs and token count.
    """

    def __init__(
        self,
        target_groups: int,
        max_rounds: int,
        enabled: bool = True,
        band: tuple[float, float] | None = None,
    ):
        self.target, self.max_rounds, self.enabled, self.band = (
            target_groups,
            max_rounds,
            enabled,
            band,
        )
        self.census = SamplingCensus()
        self.kept: list[int] = []

    @property
    def done(self) -> bool:
        return len(self.kept) >= self.target or self.census.rounds >= self.max_rounds

    def add_round(
        self, rewards: torch.Tensor, group_ids: torch.Tensor, tokens_per_sample: torch.Tensor
    ) -> list[int]:
        """Record one round; returns the group ids kept from it (in order)."""

        c = self.census
        c.rounds += 1
        groups = list(dict.fromkeys(group_ids.tolist()))
        c.prompts_sampled += len(groups)
        c.groups_launched += len(groups)
        c.responses_launched += int(group_ids.numel())
        c.tokens_launched += int(tokens_per_sample.sum())
        verdicts = group_verdicts(rewards, group_ids, self.band)
        c.groups_varied += sum(verdicts[g] in ("keep", "accuracy") for g in groups)
        kept_now = []
        for g in groups:
            v = verdicts[g] if self.enabled else "keep"
            if v != "keep":
                c.groups_dropped[v] += 1
            elif len(self.kept) >= self.target:
                c.groups_dropped["surplus"] += 1
            else:
                self.kept.append(g)
                kept_now.append(g)
                sel = group_ids == g
                c.groups_kept += 1
                c.responses_accepted += int(sel.sum())
                c.tokens_accepted += int(tokens_per_sample[sel].sum())
        if self.census.rounds >= self.max_rounds and len(self.kept) < self.target:
            c.cap_hit = True
        return kept_now

    def add_empty_round(self) -> None:
        """A round whose every sample was dropped before the verdicts (e.g. as stale): it counts
        toward ``max_rounds``, so such rounds cannot go on until the budget is gone."""

        self.census.rounds += 1
        if self.census.rounds >= self.max_rounds and len(self.kept) < self.target:
            self.census.cap_hit = True


CURRICULUM_VERDICTS = ("all_correct", "all_wrong")
"""Why the curriculum skips a prompt: its latest groups all passed, or all failed (the names of
the census verdicts for such groups)."""


def pass_rate_streak(pass_rates: list[float]) -> tuple[str | None, int]:
    """The streak at the end of one prompt's history of group pass rates (oldest first, each the
    share of a group's samples that passed): ``("all_correct", z)`` when its last z groups in a
    row had pass rate 1, ``("all_wrong", z)`` when they had pass rate 0, ``(None, 0)`` when the
    latest group was mixed or there is none. E.g. [0, 1, 1] -> ("all_correct", 2);
    [1, 0.5] -> (None, 0)."""

    if not pass_rates or 0.0 < pass_rates[-1] < 1.0:
        return None, 0
    last = pass_rates[-1]
    z = 0
    for r in reversed(pass_rates):
        if r != last:
            break
        z += 1
    return ("all_correct" if last >= 1.0 else "all_wrong"), z


def launch_probability(z: int, explore: float, floor: float) -> float:
    """The probability that a drawn prompt with a streak of z solved (or unsolved) groups is
    launched: max(explore^z, floor); 1 without a streak (z = 0)."""

    return 1.0 if z <= 0 else max(explore**z, floor)


class PassRateCurriculum:
    """Skips prompts whose recent groups all passed or all failed, before they are launched
    (GRESO's probabilistic pre-rollout filter, with fixed exploration probabilities).

    Each prompt (any hashable key, e.g. an instance seed) keeps its streak, the verdict and length
    of its run of solved or unsolved groups (:func:`pass_rate_streak`). A drawn prompt with a
    streak of z is skipped when a uniform draw ``u`` in [0, 1) from ``uniform`` is at least
    :func:`launch_probability` (so with probability 1 - max(p^z, floor)); one without a streak is
    launched and draws nothing, so the random stream advances only on prompts that could be
    skipped.

    Args:
        explore_solved, explore_unsolved: p for solved and for unsolved streaks, in [0, 1].
        floor: the least launch probability, in (0, 1].
        uniform: a source of uniform draws in [0, 1) (``random.Random(seed).random``).
    """

    def __init__(
        self,
        explore_solved: float,
        explore_unsolved: float,
        floor: float,
        uniform: Callable[[], float],
    ):
        self.explore = {"all_correct": explore_solved, "all_wrong": explore_unsolved}
        self.floor, self.uniform = floor, uniform
        self.streaks: dict = {}

    def record(self, key, pass_rate: float) -> None:
        """Add one group's pass rate (in [0, 1]) to the prompt's streak."""

        verdict, z = self.streaks.get(key, (None, 0))
        now, _ = pass_rate_streak([pass_rate])
        self.streaks[key] = (
            now,
            z + 1 if now is not None and now == verdict else int(now is not None),
        )

    def skip(self, key) -> str | None:
        """Whether to skip the prompt now drawn: the verdict of its streak (the reason it is
        skipped), or None to launch it."""

        verdict, z = self.streaks.get(key, (None, 0))
        if verdict is None:
            return None
        keep = launch_probability(z, self.explore[verdict], self.floor)
        return verdict if self.uniform() >= keep else None

    def state_dict(self) -> dict:
        return {"streaks": [[k, v, z] for k, (v, z) in self.streaks.items()]}

    def load_state_dict(self, state: dict) -> None:
        self.streaks = {k: (v, z) for k, v, z in state["streaks"]}


def minibatches(
    n: int, num_minibatches: int, epochs: int, generator: torch.Generator | None = None
):
    """Index lists for ``epochs`` passes over ``n`` samples split into ``num_minibatches`` per pass.

    Each pass is a fresh permutation (from ``generator``); every sample appears once per epoch.
    """

    for epoch in range(epochs):
        perm = torch.randperm(n, generator=generator) if num_minibatches > 1 else torch.arange(n)
        for chunk in torch.tensor_split(perm, min(num_minibatches, max(n, 1))):
            if chunk.numel():
                yield epoch, chunk.tolist()
