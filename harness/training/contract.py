"""Contract checks, callable on any batch (rung 1 of the ablation ladder).

"Algorithmic novelty cannot rescue a corrupted trajectory contract." Each check
compares the batch against an independent source: masks against the recorded
segments *and* a re-encoding of the observation texts; behavior log-probs
against the trainer's recomputation; group and turn bookkeeping against the
instances and observation histories; rewards against the declared range. A
failing check names the sample and the token.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from ..rollout.agent import encode_observation, run_episodes, state_key
from ..rollout.engine import SamplingParams
from ..rollout.trajectory import TrajectoryBatch


@dataclass
class CheckResult:
    name: str
    passed: bool
    detail: str
    sample: int | None = None
    token: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class ContractReport:
    results: list[CheckResult]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if not r.passed]

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "checks": [asdict(r) for r in self.results]}

    def summary(self) -> str:
        return "; ".join(
            f"{r.name}: {'ok' if r.passed else 'FAIL ' + r.detail}" for r in self.results
        )


def _tok_text(tokenizer, tid: int) -> str:
    return repr(tokenizer.decode([int(tid)]))


def check_masks(batch: TrajectoryBatch, tokenizer, task=None) -> CheckResult:
    """Action mask == exactly the policy-generated tokens; observations re-encode to the recorded
    tokens."""

    for b in range(batch.size):
        expected = _expected_masks(batch, b, tokenizer, task)
        if isinstance(expected, CheckResult):
            return expected
        problem = _mask_difference(batch, b, tokenizer, *expected)
        if problem is not None:
            return problem
    return CheckResult(
        "masks", True, f"{batch.size} samples, {batch.action_tokens()} action tokens"
    )


def _expected_masks(batch: TrajectoryBatch, b: int, tokenizer, task):
    """Sample ``b``'s action mask and turn ids as its segments make them (``[T]`` lists: 1 on the
    policy's tokens of an episode that did not fail, each action token's turn), or the
    :class:`CheckResult` of the first problem: a gap between segments, an observation span too many
    or one whose observation re-encodes differently, segments that end before the sequence."""

    n = int(batch.attention_mask[b].sum())
    row_tokens = batch.tokens[b].tolist()
    expected = [0.0] * batch.seq_len
    expected_turn = [-1] * batch.seq_len
    pos, obs_i, act_i = 0, 0, 0
    for kind, s, e in batch.segments[b]:
        if s != pos:
            return CheckResult(
                "masks", False, f"sample {b}: segments leave a gap at token {pos}", b, pos
            )
        if kind == "obs":
            if obs_i >= len(batch.observations[b]):
                return CheckResult(
                    "masks", False, f"sample {b}: more observation spans than observations", b, s
                )
            want = encode_observation(
                tokenizer, batch.observations[b][obs_i], first=obs_i == 0, task=task
            )
            got = row_tokens[s:e]
            if want != got:
                k = next(
                    (i for i, (x, y) in enumerate(zip(want, got)) if x != y),
                    min(len(want), len(got)),
                )
                return CheckResult(
                    "masks",
                    False,
                    f"sample {b}, token {s + k}: observation {obs_i} re-encodes differently from "
                    "the batch tokens",
                    b,
                    s + k,
                )
            obs_i += 1
        else:
            for t in range(s, e):
                expected_turn[t] = act_i
                if not batch.failed[b]:
                    expected[t] = 1.0
            act_i += 1
        pos = e
    if pos != n:
        return CheckResult(
            "masks",
            False,
            f"sample {b}: segments end at {pos} but the sequence has {n} tokens",
            b,
            pos,
        )
    return expected, expected_turn


def _mask_difference(batch, b: int, tokenizer, expected, expected_turn) -> CheckResult | None:
    """The first token of sample ``b`` whose recorded action mask or turn id differs from the
    expected ones, as a failed check; None when none does."""

    n = int(batch.attention_mask[b].sum())
    row_tokens = batch.tokens[b].tolist()
    row_mask = batch.action_mask[b].tolist()
    row_turns = batch.turn_ids[b].tolist()
    for t in range(batch.seq_len):
        if row_mask[t] != expected[t]:
            where = (
                "padding"
                if t >= n
                else ("a policy token" if expected[t] else "a prompt/observation token")
            )
            return CheckResult(
                "masks",
                False,
                f"sample {b}, token {t} ({_tok_text(tokenizer, row_tokens[t])}): action_mask is "
                f"{row_mask[t]:g} but the token is {where}",
                b,
                t,
            )
        if row_turns[t] != expected_turn[t]:
            return CheckResult(
                "masks",
                False,
                f"sample {b}, token {t}: turn_id is {row_turns[t]} but the token belongs to turn "
                f"{expected_turn[t]}",
                b,
                t,
            )
    return None


@torch.no_grad()
def recompute_logprobs(
    model,
    batch: TrajectoryBatch,
    temperature: float,
    top_k: int = 0,
    top_p: float = 1.0,
    micro_batch: int = 64,
) -> torch.Tensor:
    """Trainer-side log-probs ``[B, T]`` of every token under the sampling distribution."""

    from .policy import policy_logprobs

    out = []
    for s in range(0, batch.size, micro_batch):
        sub = batch.select(list(range(s, min(batch.size, s + micro_batch))))
        lp, _ = policy_logprobs(
            model, sub.tokens, sub.attention_mask, temperature, top_k=top_k, top_p=top_p
        )
        out.append(lp)
    return torch.cat(out, 0)


def check_logprobs(
    batch: TrajectoryBatch, recomputed: torch.Tensor, tol: float = 1e-4
) -> list[CheckResult]:
    m = batch.action_mask > 0
    if not m.any():
        return [
            CheckResult("logprobs", True, "no action tokens"),
            CheckResult("ratio", True, "no action tokens"),
        ]
    diff = (recomputed - batch.behavior_logprobs).abs().masked_fill(~m, 0.0)
    worst = int(diff.argmax())
    b, t = divmod(worst, batch.seq_len)
    max_diff = float(diff.max())
    mean_diff = float(diff[m].mean())
    lp = CheckResult(
        "logprobs",
        max_diff <= tol,
        f"max |recomputed - behavior| = {max_diff:.3g} at sample {b}, token {t} "
        f"(tolerance {tol:g})",
        None if max_diff <= tol else b,
        None if max_diff <= tol else t,
        {"max_abs_diff": max_diff, "mean_abs_diff": mean_diff},
    )
    ratio = torch.exp(recomputed - batch.behavior_logprobs).masked_fill(~m, 1.0)
    dev = (ratio - 1).abs()
    worst_r = int(dev.argmax())
    br, tr = divmod(worst_r, batch.seq_len)
    max_dev = float(dev.max())
    rr = CheckResult(
        "ratio",
        max_dev <= tol * 10,
        f"on-policy ratio max |r - 1| = {max_dev:.3g} at sample {br}, token {tr}",
        None if max_dev <= tol * 10 else br,
        None if max_dev <= tol * 10 else tr,
        {"max_ratio_dev": max_dev},
    )
    return [lp, rr]


def check_groups(batch: TrajectoryBatch, group_size: int | None = None) -> CheckResult:
    gids = batch.group_ids.tolist()
    seen: dict[int, list[int]] = {}
    for b, g in enumerate(gids):
        seen.setdefault(g, []).append(b)
    order = list(dict.fromkeys(gids))
    # contiguity: members of a group are adjacent
    flat = [b for g in order for b in seen[g]]
    if flat != list(range(batch.size)):
        b = next(i for i, (x, y) in enumerate(zip(flat, range(batch.size))) if x != y)
        return CheckResult("groups", False, f"sample {b}: group {gids[b]} is not contiguous", b)
    sizes = {g: len(m) for g, m in seen.items()}
    want = group_size or max(sizes.values())
    for g, members in seen.items():
        if len(members) != want:
            return CheckResult(
                "groups",
                False,
                f"group {g} has {len(members)} samples, expected {want}",
                members[0],
            )
        seeds = {int(batch.instance_seeds[b]) for b in members}
        prompts = {batch.observations[b][0] for b in members}
        if len(seeds) > 1 or len(prompts) > 1:
            odd = next(
                b
                for b in members
                if batch.observations[b][0] != batch.observations[members[0]][0]
                or int(batch.instance_seeds[b]) != int(batch.instance_seeds[members[0]])
            )
            return CheckResult(
                "groups",
                False,
                f"sample {odd}: in group {g} but from a different task instance",
                odd,
            )
    return CheckResult("groups", True, f"{len(seen)} groups of {want}")


def check_turns(batch: TrajectoryBatch, env_keys: bool = False) -> CheckResult:
    """Turn ids, turn rewards and state keys aligned. A state key is the observation history's
    hash, or with ``env_keys`` (the environment defines its state) a function of the history of
    observations and actions: equal histories in the batch have equal keys."""

    by_history: dict[int, tuple[int, int, int]] = {}
    for b in range(batch.size):
        n_actions = sum(1 for k, _, _ in batch.segments[b] if k == "action")
        if int(batch.n_turns[b]) != n_actions:
            return CheckResult(
                "turns",
                False,
                f"sample {b}: n_turns {int(batch.n_turns[b])} != {n_actions} actions",
                b,
            )
        nt = int(batch.n_turns[b])
        if batch.turn_rewards[b, nt:].abs().sum() > 0:
            return CheckResult(
                "turns", False, f"sample {b}: a reward is recorded after the last turn {nt - 1}", b
            )
        if not math.isclose(
            float(batch.turn_rewards[b].sum()), float(batch.reward[b]), abs_tol=1e-5
        ):
            return CheckResult(
                "turns", False, f"sample {b}: outcome reward != sum of turn rewards", b
            )
        obs = batch.observations[b]
        acts = batch.actions[b] if batch.actions else []
        for k in range(len(obs)):
            key, history = int(batch.state_keys[b, k]), state_key(obs[: k + 1])
            if env_keys:
                # an environment's state follows from what was seen and done: two guesses
                # answered by the same "higher" leave different intervals open
                done = [x for pair in zip(obs[:k], acts[:k]) for x in pair] + [obs[k]]
                if len(acts) < k:  # no actions recorded: the observations alone
                    done = obs[: k + 1]
                seen = by_history.setdefault(state_key(done), (key, b, k))
            else:
                seen = (history, b, k)
            if key != seen[0]:
                why = f"sample {seen[1]} turn {seen[2]} has the same history" if env_keys else ""
                return CheckResult(
                    "turns",
                    False,
                    f"sample {b}: state key of turn {k} does not match its history {why}".strip(),
                    b,
                )
    return CheckResult("turns", True, "turn ids, rewards and state keys aligned")


def check_rewards(batch: TrajectoryBatch, reward_range: tuple[float, float]) -> CheckResult:
    lo, hi = reward_range
    for b in range(batch.size):
        r = float(batch.reward[b])
        if not math.isfinite(r):
            return CheckResult("rewards", False, f"sample {b}: reward is {r}", b)
        if not (lo - 1e-6 <= r <= hi + 1e-6):
            return CheckResult(
                "rewards",
                False,
                f"sample {b}: reward {r:g} outside the declared range [{lo:g}, {hi:g}]",
                b,
            )
    return CheckResult("rewards", True, f"all rewards finite and in [{lo:g}, {hi:g}]")


def check_version(batch: TrajectoryBatch, version: int | None) -> CheckResult:
    if version is None:
        return CheckResult("policy_version", True, "not checked")
    bad = (batch.policy_version != version).nonzero()
    if bad.numel():
        b = int(bad[0, 0])
        return CheckResult(
            "policy_version",
            False,
            f"sample {b}: generated by version {int(batch.policy_version[b])}, engine is at "
            f"{version}",
            b,
        )
    return CheckResult("policy_version", True, f"all samples from version {version}")


def check_contract(
    batch: TrajectoryBatch,
    model,
    tokenizer,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    reward_range: tuple[float, float] = (0.0, 1.0),
    group_size: int | None = None,
    policy_version: int | None = None,
    tol: float = 1e-4,
    env_keys: bool = False,
    task=None,
) -> ContractReport:
    """Run every contract check on ``batch``; the report names the culprit of each failure.
    ``task``: the batch's task, whose system prompt and observation role the observations are
    rendered with."""

    results = [check_masks(batch, tokenizer, task)]
    results += check_logprobs(
        batch, recompute_logprobs(model, batch, temperature, top_k, top_p), tol
    )
    results += [
        check_groups(batch, group_size),
        check_turns(batch, env_keys),
        check_rewards(batch, reward_range),
        check_version(batch, policy_version),
    ]
    return ContractReport(results)


def fresh_episodes(
    engine, tokenizer, task, instances: list, group_size: int, rollout, seed: int, mismatch=None
) -> TrajectoryBatch:
    """``group_size`` episodes per instance with the rollout's sampling settings (and, if given,
    a sampler ``mismatch``), the generator seeded by ``seed``."""

    return run_episodes(
        engine,
        tokenizer,
        task,
        instances,
        group_size,
        SamplingParams(
            rollout.temperature,
            rollout.top_p,
            rollout.top_k,
            rollout.max_new_tokens,
            mismatch=mismatch,
        ),
        max_context_tokens=rollout.max_prompt_tokens,
        generator=torch.Generator().manual_seed(seed),
    )


def sample_and_check(
    engine,
    model,
    tokenizer,
    task,
    instances: list,
    group_size: int,
    rollout,
    *,
    seed: int,
    reward_range: tuple[float, float],
) -> tuple[TrajectoryBatch, ContractReport]:
    """Fresh episodes (``group_size`` per instance, the rollout's sampling settings, generator
    seeded by ``seed``) from ``engine``, and the contract checked on them against ``model``."""

    batch = fresh_episodes(engine, tokenizer, task, instances, group_size, rollout, seed)
    report = check_contract(
        batch,
        model,
        tokenizer,
        temperature=rollout.temperature,
        top_k=rollout.top_k,
        top_p=rollout.top_p,
        reward_range=reward_range,
        group_size=group_size,
        policy_version=engine.policy_version,
        env_keys=task.env_state_keys,
        task=task,
    )
    return batch, report
