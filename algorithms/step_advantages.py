"""Turn- and step-level advantage estimators (the A blank of multi-turn episodes): per-turn returns,
GiGPO's anchor states, a process reward model's step scores, PRIME's implicit process rewards, and
hierarchical (plan / execute) credit. Shapes: ``B`` samples, ``T`` tokens, ``K`` turns; each returns
token-level advantages ``[B, T]`` (zero off the mask), detached. Registered on
:data:`~.advantage_registry.ESTIMATORS` by the decorators below; :mod:`.advantages` imports this
module, so every estimator is registered wherever the registry is read."""

from __future__ import annotations

import torch

from .advantage_registry import ESTIMATORS, broadcast, group_index, group_stats


@ESTIMATORS.register(
    "turn_return",
    inputs=("rewards", "mask", "turn_rewards", "turn_ids", "group_ids", "token_penalty"),
    reads=("advantage.gamma", "advantage.turn_baseline"),
)
def turn_return(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    turn_rewards: torch.Tensor,
    turn_ids: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    gamma: float = 1.0,
    turn_baseline: str = "group",
    token_penalty: torch.Tensor | None = None,
) -> torch.Tensor:
    """Turn-level returns G_{i,k} = sum_{k' >= k} gamma^(k'-k) r_{i,k'}, on turn k's action tokens.

    Args:
        turn_rewards: ``[B, K]``; turn_ids: ``[B, T]`` (-1 off action tokens).
        token_penalty: ``[B, T]`` per-token KL penalty already multiplied by beta (KL in the
            reward): turn k's reward becomes r_{i,k} minus the penalties of its action tokens.
        turn_baseline: "group": subtract the mean G at the same turn index over the group's samples
            that reached it (a turn reached by one sample only gets A = 0 there); "none": A = G.
    """

    G, reached, valid_turns = turn_returns(turn_rewards, mask, turn_ids, gamma, token_penalty)
    B, K = G.shape
    A = G.clone()
    if turn_baseline == "group" and group_ids is not None:
        inv, n_groups = group_index(group_ids)
        for k in range(K):
            rk = reached[:, k].double()
            tot = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, inv, G[:, k] * rk)
            cnt = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, inv, rk)
            mean = tot[inv] / cnt[inv].clamp(min=1)
            A[:, k] = torch.where(cnt[inv] > 1, G[:, k] - mean, torch.zeros_like(mean))
    return to_tokens(A, valid_turns, mask)


def turn_returns(
    turn_rewards: torch.Tensor,
    mask: torch.Tensor,
    turn_ids: torch.Tensor,
    gamma: float,
    token_penalty: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Discounted return from each turn, ``G [B, K]`` float64 (gamma per environment step; turn
    k's reward less the KL-in-reward penalties of its action tokens), which turns each sample
    reached ``[B, K]`` bool, and the turn id of each trained token ``[B, T]`` (-1 elsewhere)."""

    r = turn_rewards.double()
    B, K = r.shape
    valid_turns = torch.where(mask > 0, turn_ids, torch.full_like(turn_ids, -1))
    if token_penalty is not None:
        pen = token_penalty.double() * mask.double()
        r = r - torch.stack([(pen * (valid_turns == k)).sum(1) for k in range(K)], dim=1)
    G = torch.zeros_like(r)
    running = torch.zeros(B, dtype=torch.float64)
    for k in range(K - 1, -1, -1):
        running = r[:, k] + gamma * running
        G[:, k] = running
    reached = torch.stack([(valid_turns == k).any(1) for k in range(K)], dim=1)
    return G, reached, valid_turns


def to_tokens(per_turn: torch.Tensor, valid_turns: torch.Tensor, mask: torch.Tensor):
    """``[B, K]`` per-turn values -> ``[B, T]`` on each turn's trained action tokens, float32."""

    idx = valid_turns.clamp(min=0)
    return (per_turn.gather(1, idx) * (valid_turns >= 0).double() * mask.double()).float()


def anchor_groups(
    group_ids: torch.Tensor, state_keys: torch.Tensor, reached: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """GiGPO's step groups: the reached steps ``(i, k)`` of one task group whose environment
    state key is the same (at any turn index). Returns the anchor group index of each step
    ``[B, K]`` long (-1 where not reached) and each step's anchor-group size ``[B, K]``."""

    B, K = state_keys.shape
    inv, _ = group_index(group_ids)
    pairs = torch.stack([inv[:, None].expand(B, K), state_keys.long()], dim=-1)[reached]
    index = torch.full((B, K), -1, dtype=torch.long)
    size = torch.zeros(B, K, dtype=torch.float64)
    if pairs.numel():
        uniq, which, counts = torch.unique(pairs, dim=0, return_inverse=True, return_counts=True)
        index[reached] = which
        size[reached] = counts.double()[which]
    return index, size


@ESTIMATORS.register(
    "gigpo",
    inputs=(
        "rewards",
        "mask",
        "group_ids",
        "turn_rewards",
        "turn_ids",
        "state_keys",
        "token_penalty",
    ),
    reads=("advantage.gamma", "advantage.gigpo_omega", "advantage.gigpo_norm"),
)
def gigpo(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    group_ids: torch.Tensor,
    turn_rewards: torch.Tensor,
    turn_ids: torch.Tensor,
    state_keys: torch.Tensor,
    gamma: float = 0.95,
    gigpo_omega: float = 1.0,
    gigpo_norm: str = "mean_norm",
    token_penalty: torch.Tensor | None = None,
) -> torch.Tensor:
    """GiGPO (Feng et al. 2025): A = A^E + omega A^S, per step, on its tokens.

    A^E(tau_i) = (R_i - mean_j R_j) / F over the task group's episodes; A^S = (G_{i,k} - mean) / F
    over the anchor group of step (i, k): the steps of the same task group whose environment state
    key is the same (``state_keys [B, K]``), with G the discounted return from the step (gamma per
    environment step). F = 1 (``mean_norm``) or std + 1e-6 (``mean_std_norm``; ddof 1, as the
    reference implementation's ``torch.std``).
    An anchor group of one step gives A^S = 0. With KL in the reward (``token_penalty [B, T]``),
    each turn's reward, and R, lose its tokens' penalties.
    """

    G, reached, valid_turns = turn_returns(turn_rewards, mask, turn_ids, gamma, token_penalty)
    R = rewards.double()
    if token_penalty is not None:
        R = R - (token_penalty.double() * mask.double()).sum(1)
    mean, std, _, _ = group_stats(R, group_ids, ddof=1)
    scale = std + 1e-6 if gigpo_norm == "mean_std_norm" else torch.ones_like(std)
    a_episode = (R - mean) / scale
    index, size = anchor_groups(group_ids, state_keys, reached)
    a_step = torch.zeros_like(G)
    if reached.any():
        idx = index[reached]
        s_mean, s_std, _, _ = group_stats(G[reached], idx, ddof=1)
        s_scale = s_std + 1e-6 if gigpo_norm == "mean_std_norm" else torch.ones_like(s_std)
        step = torch.where(size[reached] > 1, (G[reached] - s_mean) / s_scale, 0.0)
        a_step[reached] = step
    return to_tokens(a_episode[:, None] + gigpo_omega * a_step, valid_turns, mask)


def _turn_penalty(token_penalty, mask, turn_ids, K):
    """``[B, K]``: the KL-in-reward penalties of each turn's trained tokens (0 without KL)."""

    if token_penalty is None:
        return torch.zeros(mask.shape[0], K, dtype=torch.float64)
    _, _, valid = turn_returns(torch.zeros(mask.shape[0], K), mask, turn_ids, 1.0)
    pen = token_penalty.double() * mask.double()
    return torch.stack([(pen * (valid == k)).sum(1) for k in range(K)], dim=1)


@ESTIMATORS.register(
    "prm",
    inputs=("rewards", "mask", "group_ids", "turn_ids", "step_scores", "token_penalty"),
    reads=(
        "advantage.prm.mode",
        "advantage.prm.outcome",
        "advantage.std_ddof",
        "advantage.std_eps",
    ),
    applies=("advantage.prm",),
)
def prm(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    group_ids: torch.Tensor,
    turn_ids: torch.Tensor,
    step_scores: torch.Tensor,
    mode: str = "advantage",
    outcome: bool = True,
    std_ddof: int = 1,
    std_eps: float = 1e-6,
    token_penalty: torch.Tensor | None = None,
) -> torch.Tensor:
    """Explicit process reward model: step scores ``s [B, K]`` (NaN past an episode's
    steps) as process supervision, with the outcome R kept or not.

    - ``sum``: R'_i = sum_k s_{i,k} (+ R_i); A_i = (R'_i - mean_g R') / (std_g R' + eps), on every
      trained token. The total grows with the number of steps.
    - ``min``: R'_i = min_k s_{i,k} (+ R_i), normalized the same way. A step more can only lower it.
    - ``advantage`` (DeepSeekMath process supervision): s~_{i,k} = (s_{i,k} - mean) / (std + eps)
      over every step of the task group's episodes; turn k's tokens get A = sum_{k' >= k} s~_{i,k'}
      (+ the group-normalized outcome (R_i - mean_g R) / (std_g R + eps)).

    KL in the reward (``token_penalty [B, T]``): each step's score loses its tokens' penalties.
    A group whose totals are all equal gets A = 0 from them (as GRPO).
    """

    B, K = step_scores.shape
    s = step_scores.double()
    has = ~s.isnan()
    s = torch.where(has, s - _turn_penalty(token_penalty, mask, turn_ids, K), torch.zeros_like(s))
    R = rewards.double()

    def normalized(x):
        mean, std, _, equal = group_stats(x, group_ids, std_ddof)
        return torch.where(equal, torch.zeros_like(x), (x - mean) / (std + std_eps))

    valid = torch.where(mask > 0, turn_ids, torch.full_like(turn_ids, -1))
    if mode in ("sum", "min"):
        if mode == "sum":
            total = s.sum(1)
        else:
            total = torch.where(has, s, torch.full_like(s, torch.inf)).min(1).values
            total = torch.where(has.any(1), total, torch.zeros_like(total))
        if outcome:
            total = total + R
        return broadcast(normalized(total), mask)
    if mode != "advantage":
        raise ValueError(f"prm mode: unknown '{mode}'; valid: sum, min, advantage")
    z = _pooled_step_z(s, has, group_ids, std_ddof, std_eps)
    to_go = z.flip(1).cumsum(1).flip(1)  # sum over steps k' >= k
    per_turn = to_go + (normalized(R)[:, None] if outcome else 0.0)
    return to_tokens(per_turn, valid, mask)


def _pooled_step_z(
    s: torch.Tensor, has: torch.Tensor, group_ids: torch.Tensor, std_ddof: int, std_eps: float
) -> torch.Tensor:
    """Each step score of ``s`` ``[B, K]`` (where ``has``) normalized over every step of its task
    group's episodes: (s - mean) / (std + eps), 0 where there is no step or the pool has one."""

    inv, n_groups = group_index(group_ids)
    h = has.double()
    cnt = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, inv, h.sum(1))
    tot = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, inv, (s * h).sum(1))
    mean = (tot / cnt.clamp(min=1))[inv]
    ss = torch.zeros(n_groups, dtype=torch.float64).index_add_(
        0, inv, (((s - mean[:, None]) ** 2) * h).sum(1)
    )
    n = cnt[inv]
    std = torch.where(n > std_ddof, (ss[inv] / (n - std_ddof).clamp(min=1)).sqrt(), 0.0)
    return torch.where(has & (n[:, None] > 1), (s - mean[:, None]) / (std[:, None] + std_eps), 0.0)


@ESTIMATORS.register(
    "prime",
    inputs=("rewards", "mask", "group_ids", "process_rewards", "token_penalty"),
    reads=("advantage.singleton",),
    applies=("advantage.prime",),
)
def prime(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    group_ids: torch.Tensor,
    process_rewards: torch.Tensor,
    singleton: str = "zero",
    token_penalty: torch.Tensor | None = None,
) -> torch.Tensor:
    """PRIME (Cui et al. 2025), exact leave-one-out (not the code's K/(K-1) form), gamma 1,
    no final whitening:

        A_{i,t} = sum_{s >= t} [r_{i,s} - (1/(K-1)) sum_{j != i} r(y^j)/|y^j|]
                  + R_i - (1/(K-1)) sum_{j != i} R_j

    with ``process_rewards [B, T]`` r_{i,s} = beta log(pi_phi/pi_ref) on action tokens, r(y^j) the
    sum over sample j's tokens and |y^j| its trained tokens. KL in the reward (``token_penalty``)
    is subtracted from r. A group of one: A = 0 (``singleton`` zero) or A without baselines (raw).
    """

    m = mask.double()
    r = process_rewards.double() * m
    if token_penalty is not None:
        r = r - token_penalty.double() * m
    per_token = r.sum(1) / m.sum(1).clamp(min=1)  # r(y^j) / |y^j|
    R = rewards.double()
    mean_p, _, count, _ = group_stats(per_token, group_ids)
    mean_r, _, _, _ = group_stats(R, group_ids)
    k1 = (count - 1).clamp(min=1)
    base_p = torch.where(count > 1, (mean_p * count - per_token) / k1, torch.zeros_like(R))
    base_r = torch.where(count > 1, (mean_r * count - R) / k1, torch.zeros_like(R))
    to_go = ((r - base_p[:, None] * m).flip(1).cumsum(1).flip(1)) * m
    adv = to_go + (R - base_r)[:, None] * m
    if singleton == "zero":
        adv = torch.where((count > 1)[:, None], adv, torch.zeros_like(adv))
    return adv.float()


@ESTIMATORS.register(
    "hierarchical",
    inputs=("rewards", "mask", "group_ids", "turn_ids", "levels", "step_labels", "token_penalty"),
    reads=("advantage.hierarchical_norm",),
)
def hierarchical(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    group_ids: torch.Tensor,
    turn_ids: torch.Tensor,
    levels: torch.Tensor,
    step_labels: torch.Tensor,
    hierarchical_norm: str = "mean_norm",
    token_penalty: torch.Tensor | None = None,
) -> torch.Tensor:
    """Hierarchical credit: an outcome advantage for high-level turns and a subgoal advantage for
    low-level ones, each level against its own baseline (one baseline per level).

    Args:
        rewards: ``[B]`` outcome R. mask: ``[B, T]``. group_ids: ``[B]`` task group.
        turn_ids: ``[B, T]`` turn of each action token (-1 elsewhere).
        levels: ``[B, K]`` the environment's level of each turn: 0 high (plan), 1 low (execute),
            -1 none (past the end, or a turn the environment gave no level).
        step_labels: ``[B, K]`` the subgoal reward of each low-level turn (1 subgoal reached,
            0 not), NaN where none.
        token_penalty: ``[B, T]`` KL-in-reward penalty per token, times beta, or None.

    Per turn (i, k) with trained tokens, P_{i,k} the sum of its tokens' penalties (0 without KL):

        high (level 0, and level -1):  x_{i,k} = R_i - P_{i,k}
            pool: the high-level turns of the task group (one per episode in plan_execute);
        low (level 1):                  x_{i,k} = l_{i,k} - P_{i,k}   (l the step label)
            pool: the low-level turns of the task group at the same subgoal index j (the
            turn's rank among its episode's low-level turns: 0 for the first executor turn);
        A_{i,k} = (x_{i,k} - mean_pool x) / F,   on turn k's action tokens,

    F = 1 (``mean_norm``) or the pool's std (ddof 1) + 1e-6 (``mean_std_norm``). A turn alone in
    its pool, or in a pool whose x are all equal, gets A = 0. A turn with no level (-1) gets the
    outcome advantage (a single-turn task without levels gets exactly GRPO's; with several turns
    each unlabelled turn joins the pool, so longer episodes weigh more in it). A low-level
    turn without a label (NaN) gets A = 0 and stays out of its pool's baseline.
    Returns ``[B, T]`` float32, 0 off the mask.
    """

    B, K = levels.shape
    valid = torch.where(mask > 0, turn_ids, torch.full_like(turn_ids, -1))
    reached = torch.stack([(valid == k).any(1) for k in range(K)], dim=1)
    pen = torch.zeros(B, K, dtype=torch.float64)
    if token_penalty is not None:
        p = token_penalty.double() * mask.double()
        pen = torch.stack([(p * (valid == k)).sum(1) for k in range(K)], dim=1)
    low = levels == 1
    labels = step_labels.double()
    x = torch.where(low, labels.nan_to_num(0.0), rewards.double()[:, None].expand(B, K)) - pen
    subgoal = low.long().cumsum(1) - 1  # rank among the episode's low-level turns
    inv, _ = group_index(group_ids)
    pool = inv[:, None] * (K + 1) + torch.where(low, subgoal + 1, torch.zeros_like(subgoal))
    counted = reached & ~(low & labels.isnan())
    A = torch.zeros(B, K, dtype=torch.float64)
    if counted.any():
        v = x[counted]
        mean, std, count, equal = group_stats(v, pool[counted], ddof=1)
        scale = std + 1e-6 if hierarchical_norm == "mean_std_norm" else torch.ones_like(std)
        A[counted] = torch.where(equal | (count < 2), torch.zeros_like(v), (v - mean) / scale)
    return to_tokens(A, valid, mask)
