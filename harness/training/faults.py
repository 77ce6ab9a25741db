"""Faults planted in a run's training on purpose (``arms.<arm>.fault``): negative controls, arms a
comparison must see lose. They act on what the update learns from and on nothing else: the held-out
evaluation, the ledger and the logged rewards are the run's true ones.

    rewards: shuffle   each training batch's outcome rewards are permuted at random across its rows
                       before the advantages are computed (seeded by the run's training seed and the
                       step), so the policy learns from rewards unrelated to its answers
"""

from __future__ import annotations

import torch

REWARD_FAULTS = ("none", "shuffle")


def reward_permutation(n: int, seed: int, step: int) -> torch.Tensor:
    """A random permutation of ``n`` rows from a generator of its own, seeded by ``seed`` (the run's
    training seed) and ``step``: the same at a step of a resumed run, and the run's other random
    streams untouched (a faulted arm samples what its unfaulted twin samples)."""

    gen = torch.Generator().manual_seed((seed * 1_000_003 + step) % 2**63)
    return torch.randperm(n, generator=gen)


def planted_rewards(
    fault: str,
    reward: torch.Tensor,
    turn_rewards: torch.Tensor,
    n_turns: torch.Tensor,
    seed: int,
    step: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The rewards the advantages are computed from under ``fault`` (``"none"``: these ones).

    Args:
        reward: ``[B]`` outcome rewards. turn_rewards: ``[B, K]`` per-turn rewards.
        n_turns: ``[B]`` turns of each episode. seed, step: the run's training seed and step.

    Returns:
        ``(reward, turn_rewards)``. With ``"shuffle"``, row i gets the outcome reward of row
        ``perm[i]`` and, as its per-turn rewards, that reward on its own last turn (0 on the
        others): the per-turn rewards still sum to the outcome reward, and on one-turn tasks they
        are the outcome rewards, permuted alike. The multiset of the outcome rewards is unchanged.
    """

    if fault == "none":
        return reward, turn_rewards
    if fault != "shuffle":
        raise ValueError(f"unknown reward fault '{fault}' (valid: {', '.join(REWARD_FAULTS)})")
    perm = reward_permutation(reward.shape[0], seed, step)
    shuffled = reward[perm]
    turns = torch.zeros_like(turn_rewards)
    if turns.numel():
        last = (n_turns.long() - 1).clamp(0, turns.shape[1] - 1)
        turns[torch.arange(turns.shape[0]), last] = shuffled.to(turns.dtype)
    return shuffled, turns
