"""The trajectory contract: what flows from rollout to algorithms (../shared/DESIGN.md).

All tensors are right-padded to a common length T.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import torch


@dataclass
class TrajectoryBatch:
    tokens: torch.Tensor  # [B, T] long: prompt, actions and observations
    attention_mask: torch.Tensor  # [B, T] long: 1 on real tokens, 0 on padding
    action_mask: torch.Tensor  # [B, T] float: 1 on policy-generated tokens that are trained
    behavior_logprobs: torch.Tensor  # [B, T] float: log-prob of each action token at sampling time
    turn_ids: torch.Tensor  # [B, T] long: environment turn of each action token, -1 elsewhere
    turn_rewards: torch.Tensor  # [B, K] float: per-turn rewards (0 past the episode's turns)
    reward: torch.Tensor  # [B] float: outcome reward (sum of turn rewards)
    group_ids: torch.Tensor  # [B] long: prompt group (task instance) of each sample
    policy_version: torch.Tensor  # [B] long: weights version that generated it
    truncated: (
        torch.Tensor
    )  # [B] bool: hit a length limit (an action cut at max_new_tokens, or a context/turn cap)
    state_keys: (
        torch.Tensor
    )  # [B, K] long: hash of the observation history at each turn (0 past the end)
    potentials: torch.Tensor  # [B, K + 1] float64: Phi before each turn's action; 0 from the end on
    step_labels: (
        torch.Tensor
    )  # [B, K] float: the environment's label of each step (1 right, 0 wrong, NaN none)
    levels: (
        torch.Tensor
    )  # [B, K] long: the level of each turn (0 high/plan, 1 low/execute; -1 none)
    n_turns: torch.Tensor  # [B] long: actions taken
    failed: torch.Tensor  # [B] bool: a task/verifier failure; such samples carry no trained tokens
    instance_seeds: torch.Tensor  # [B] long
    terminated: (
        torch.Tensor
    )  # [B] bool: ended by the environment's terminal condition (no bootstrap past it)
    # [B, T] long: the weights version that sampled each action token, -1 elsewhere. A sample
    # whose generation continued across a weight update (a partial rollout resumed on new weights)
    # spans several; ``policy_version`` is its oldest. None at construction: every action token
    # of a row has the row's ``policy_version``.
    token_versions: torch.Tensor | None = None
    # python-side records, one entry per sample
    observations: list[list[str]] = field(default_factory=list)  # obs texts; [0] is the prompt
    actions: list[list[str]] = field(default_factory=list)  # action texts per turn
    segments: list[list[tuple[str, int, int]]] = field(
        default_factory=list
    )  # (kind, start, end) token spans
    failure_reasons: list[str | None] = field(default_factory=list)
    snapshots: list[list[Any]] = field(
        default_factory=list
    )  # the environment's snapshot() before each action, where recorded (branching); else []
    # (outcome, wall seconds) of each tool call the episode made (harness/tasks/tooled.py); []
    tool_log: list[list[tuple[str, float]]] = field(default_factory=list)
    task_name: str = ""

    _TENSORS = (
        "tokens",
        "attention_mask",
        "action_mask",
        "behavior_logprobs",
        "turn_ids",
        "turn_rewards",
        "reward",
        "group_ids",
        "policy_version",
        "truncated",
        "state_keys",
        "potentials",
        "step_labels",
        "levels",
        "n_turns",
        "failed",
        "instance_seeds",
        "terminated",
        "token_versions",
    )
    _LISTS = ("observations", "actions", "segments", "failure_reasons", "snapshots", "tool_log")

    def __post_init__(self) -> None:
        if not self.tool_log:  # made without the agent loop (a file of pairs, a saved batch)
            self.tool_log = [[] for _ in range(int(self.tokens.shape[0]))]
        if self.token_versions is None:
            acts = self.turn_ids >= 0
            self.token_versions = torch.where(
                acts,
                self.policy_version.to(torch.long).unsqueeze(1),
                torch.full_like(acts, -1, dtype=torch.long),
            )

    def version_span(self) -> torch.Tensor:
        """``[B]`` long: newest minus oldest version among each row's action tokens (0: one)."""

        v = self.token_versions
        acts = v >= 0
        newest = torch.where(acts, v, torch.full_like(v, -1)).amax(1)
        oldest = torch.where(acts, v, torch.full_like(v, 2**62)).amin(1)
        return torch.where(acts.any(1), newest - oldest, torch.zeros_like(newest))

    @property
    def size(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def seq_len(self) -> int:
        return int(self.tokens.shape[1])

    def group_size(self) -> int:
        _, counts = torch.unique(self.group_ids, return_counts=True)
        return int(counts.max()) if counts.numel() else 0

    def action_tokens(self) -> int:
        return int(self.action_mask.sum().item())

    def row_action_tokens(self) -> torch.Tensor:
        """Generated (action) tokens of each row ``[B]``, failed samples included."""

        return torch.tensor(
            [sum(e - s for k, s, e in segs if k == "action") for segs in self.segments],
            dtype=torch.long,
        )

    def launched_tokens(self) -> int:
        """Every generated token, including those of failed samples."""

        return int(self.row_action_tokens().sum())

    def prompt_tokens(self) -> int:
        return int(sum(sum(e - s for k, s, e in segs if k == "obs") for segs in self.segments))

    def advantage_inputs(self) -> dict[str, Any]:
        """The per-turn tensors of this batch that ``compute_advantages`` takes, by keyword."""

        return {
            "turn_rewards": self.turn_rewards,
            "turn_ids": self.turn_ids,
            "truncated": self.truncated,
            "state_keys": self.state_keys,
            "potentials": self.potentials,
            "levels": self.levels,
            "step_labels": self.step_labels,
        }

    def unit_ids(self, rows: list[int]) -> dict[str, torch.Tensor]:
        """The prompt group ``[R]`` and turn ``[R, T]`` of ``rows``, by the keywords the
        normalization blank's weights take (prompt-, task- and turn-level modes)."""

        idx = torch.as_tensor(rows, dtype=torch.long)
        return {"group_ids": self.group_ids[idx], "turn_ids": self.turn_ids[idx]}

    def select(self, idx: list[int] | torch.Tensor) -> TrajectoryBatch:
        idx_t = torch.as_tensor(idx, dtype=torch.long)
        kw: dict[str, Any] = {name: getattr(self, name)[idx_t] for name in self._TENSORS}
        il = idx_t.tolist()
        for name in self._LISTS:
            values = getattr(self, name)
            kw[name] = [values[i] for i in il]
        return TrajectoryBatch(**kw, task_name=self.task_name)

    def to(self, device) -> TrajectoryBatch:
        for name in self._TENSORS:
            setattr(self, name, getattr(self, name).to(device))
        return self

    def clone(self) -> TrajectoryBatch:
        kw = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in self._TENSORS:
            kw[name] = kw[name].clone()
        for name in self._LISTS:
            kw[name] = [list(x) if isinstance(x, list) else x for x in kw[name]]
        return TrajectoryBatch(**kw)

    @staticmethod
    def concat(batches: list[TrajectoryBatch], pad_id: int = 0) -> TrajectoryBatch:
        T = max(b.seq_len for b in batches)
        K = max(b.turn_rewards.shape[1] for b in batches)
        padded = {
            "tokens": pad_id,
            "attention_mask": 0,
            "action_mask": 0.0,
            "behavior_logprobs": 0.0,
            "turn_ids": -1,
            "token_versions": -1,
        }
        kw: dict[str, Any] = {}
        for name in TrajectoryBatch._TENSORS:
            parts = []
            for b in batches:
                t = getattr(b, name)
                if name in padded and t.shape[1] < T:
                    t = torch.cat(
                        [t, torch.full((t.shape[0], T - t.shape[1]), padded[name], dtype=t.dtype)],
                        1,
                    )
                width = K + 1 if name == "potentials" else K
                padded_k = ("turn_rewards", "state_keys", "potentials", "step_labels", "levels")
                if name in padded_k and t.shape[1] < width:
                    fill = {"step_labels": float("nan"), "levels": -1}.get(name, 0)
                    pad = torch.full((t.shape[0], width - t.shape[1]), fill, dtype=t.dtype)
                    t = torch.cat([t, pad], 1)
                parts.append(t)
            kw[name] = torch.cat(parts, 0)
        for name in TrajectoryBatch._LISTS:
            kw[name] = [x for b in batches for x in getattr(b, name)]
        return TrajectoryBatch(**kw, task_name=batches[0].task_name)
