"""The actor-critic objective's learning signal from a batch and its critic's values: the rewards
on tokens (a KL penalty in the reward from pi_old), then the advantages and the value targets
(GAE, or V-trace's off-policy targets), bootstrapped only where a limit cut the episode short."""

from __future__ import annotations

import torch

from sixblanks.algorithms.critic import gae, place_rewards, sao_policy_lambda
from sixblanks.algorithms.offpolicy import vtrace
from sixblanks.algorithms.regularizers import kl_estimate

from ...rollout.trajectory import TrajectoryBatch
from ..context import RunContext
from ..faults import planted_rewards


def token_rewards(
    ctx: RunContext, batch: TrajectoryBatch, mask: torch.Tensor, old_logp, ref_logp
) -> tuple[torch.Tensor, dict[str, float]]:
    """(the rewards placed on the episode's steps ``[B, T]`` (``mask [B, T]``), with the reward
    KL penalty from pi_old to pi_ref (``old_logp``, ``ref_logp`` ``[B, T]``) where the blanks put
    one; its metric). The rewards learnt from: the batch's, or a planted fault's
    (arms.<arm>.fault)."""

    penalty, metrics = None, {}
    reg = ctx.blanks.regularizer
    if reg.reward_kl_coef > 0:
        kl_tok = kl_estimate(old_logp, ref_logp, reg.reward_kl_estimator) * mask
        penalty = reg.reward_kl_coef * kl_tok
        metrics["reward_kl"] = float(kl_tok.sum(1).mean())
    s = ctx.settings
    rewards = (batch.reward, batch.turn_rewards, batch.n_turns)
    _, turn_rewards = planted_rewards(s.reward_fault, *rewards, s.train_seed, ctx.step)
    return place_rewards(mask, batch.turn_ids, turn_rewards, penalty), metrics


def advantages_and_returns(
    a, spec, batch: TrajectoryBatch, rewards, old_v, mask, boot, old_logp
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, value targets), both ``[B, T]`` float64, under the advantage blank ``a`` and
    its critic ``spec``, from the rewards on tokens, the
    critic's values ``old_v`` and ``mask`` (``[B, T]``), its bootstrap values ``boot [B]`` and
    pi_old's log-probs ``[B, T]`` (V-trace's rho = pi_old / pi_behaviour)."""

    # bootstrap only where a limit cut the episode short; never past the environment's
    # terminal state
    cut = ~batch.terminated & ~batch.failed
    bootstrap = torch.where(
        cut & torch.tensor(spec.bootstrap_truncated),
        boot.double(),
        torch.zeros_like(boot, dtype=torch.float64),
    )
    if spec.targets == "vtrace":  # off-policy targets: rho = pi_old / pi_behaviour
        log_rhos = (old_logp - batch.behavior_logprobs).double()
        traces = (spec.rho_bar, spec.c_bar, spec.rho_bar_pg)
        values = (rewards, old_v.double(), bootstrap, log_rhos, mask)
        ret, adv = vtrace(*values, a.gamma, a.lam, *traces)
    else:
        adv, ret = gae(rewards, old_v.double(), mask, a.gamma, a.lam, bootstrap)
    if spec.policy_lambda_alpha is not None:  # SAO: the policy's lambda follows the length
        lam = sao_policy_lambda(mask, spec.policy_lambda_alpha)
        adv, _ = gae(rewards, old_v.double(), mask, a.gamma, lam, bootstrap)
    return adv, ret
