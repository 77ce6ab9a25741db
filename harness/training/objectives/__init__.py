"""Objectives: how a collected batch becomes optimizer steps. Each subclasses
:class:`~sixblanks.harness.training.base.Objective`: ``prepare(collected)`` (the no-grad passes),
``update(prepared)`` (through the shared minibatch routine, :mod:`.accumulate`) and
``state_dict()``; ``worst_extra(rows)`` where the update charges a second model's calls. An
objective with a second trained model is a new file here."""

from __future__ import annotations

from ..context import RunContext
from .actor_critic import ActorCritic
from .dpo import DPO
from .policy_gradient import PolicyGradient
from .process import ProcessCredit
from .sft import SFT


def make_objective(ctx: RunContext):
    """The objective the blanks name: ``objective`` (pg, sft, dpo); pg with ``advantage.estimator:
    gae`` is actor-critic, with ``prm`` or ``prime`` it trains a process reward model too."""

    b = ctx.blanks
    if b.objective == "sft":
        return SFT(ctx)
    if b.objective == "dpo":
        return DPO(ctx)
    if b.advantage.estimator == "gae":
        return ActorCritic(ctx)
    if b.advantage.estimator in ("prm", "prime"):
        return ProcessCredit(ctx)
    return PolicyGradient(ctx)


__all__ = ["DPO", "SFT", "ActorCritic", "PolicyGradient", "ProcessCredit", "make_objective"]
