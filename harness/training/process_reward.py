"""Process reward models: the second models of the 'prm' and 'prime' estimators, and
the measures that check them.

- :class:`StepScorer`: an explicit PRM, a head that scores each step (the state after the step's
  last action token), trained on the environment's step labels; or a user-supplied scorer.
- :class:`ImplicitPRM`: PRIME's implicit PRM, a causal LM pi_phi trained on outcome labels, whose
  token rewards are beta log(pi_phi / pi_ref).
- Measures: AUC of outcome prediction, reliability (calibration) counts per step position, and
  the intervention probe: corrupt one step and see whether the process reward drops there.

Shapes: ``B`` episodes, ``T`` tokens, ``K`` turns (steps).
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F

from ..models import backbone
from ..rollout.trajectory import TrajectoryBatch
from .critic import ValueModel


def step_positions(turn_ids: torch.Tensor, mask: torch.Tensor, K: int) -> torch.Tensor:
    """Position ``[B, K]`` of the last action token of each turn (-1 where the turn has none)."""

    B, T = turn_ids.shape
    pos = torch.arange(T).expand(B, T)
    out = torch.full((B, K), -1, dtype=torch.long)
    for k in range(K):
        on = (turn_ids == k) & (mask > 0)
        out[:, k] = torch.where(on.any(1), torch.where(on, pos, -1).max(1).values, -1)
    return out


def auc(scores: torch.Tensor, labels: torch.Tensor) -> float | None:
    """Area under the ROC curve of ``scores [N]`` for binary ``labels [N]`` (ties count 1/2);
    None when one class is absent."""

    s, y = scores.double().flatten(), labels.double().flatten() >= 0.5
    pos, neg = s[y], s[~y]
    if pos.numel() == 0 or neg.numel() == 0:
        return None
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0).double() + 0.5 * (diff == 0).double()).mean())


def calibration_metrics(
    scores: torch.Tensor, labels: torch.Tensor, bins: int, prefix: str = "prm_calib"
) -> dict[str, float]:
    """Reliability counts of step scores ``[B, K]`` against step labels ``[B, K]`` (NaN: none), per
    step position k and score bin b: ``{prefix}.{k}.{b}.n`` (steps), ``.score`` (sum of scores)
    and ``.label`` (sum of labels). Summed over a run they give the reliability plot per
    position."""

    out: dict[str, float] = {}
    has = ~labels.isnan() & ~scores.isnan()
    for k in range(scores.shape[1]):
        s, y = scores[has[:, k], k].double(), labels[has[:, k], k].double()
        if s.numel() == 0:
            continue
        b = (s * bins).long().clamp(0, bins - 1)
        for j in torch.unique(b).tolist():
            sel = b == j
            out[f"{prefix}.{k}.{j}.n"] = float(sel.sum())
            out[f"{prefix}.{k}.{j}.score"] = float(s[sel].sum())
            out[f"{prefix}.{k}.{j}.label"] = float(y[sel].sum())
    return out


class StepScorer(torch.nn.Module):
    """An explicit PRM: ``logits(batch) -> [B, K]``, the logit that step k is right, read at the
    last action token of the step (the state after it). ``trunk``: "separate" (a copy of the
    policy's trunk, trained whole) or "shared" (a head on the policy's hidden states, passed in
    detached)."""

    def __init__(self, policy, trunk: str = "separate"):
        super().__init__()
        self.model = ValueModel(policy, trunk)
        # the policy is read, not owned (not a submodule: its weights stay out of this state)
        self._policy = [policy] if trunk == "shared" else []

    def logits(self, batch: TrajectoryBatch, device) -> torch.Tensor:
        tokens, attn = batch.tokens.to(device), batch.attention_mask.to(device)
        hidden = None
        if self._policy:
            with torch.no_grad():
                base = backbone(self._policy[0])(input_ids=tokens, attention_mask=attn)
                hidden = base.last_hidden_state.detach()
        per_token = self.model(tokens, attn, hidden)  # [B, T]
        K = batch.turn_rewards.shape[1]
        pos = step_positions(batch.turn_ids, batch.action_mask, K).to(device)
        out = per_token.gather(1, pos.clamp(min=0))
        return torch.where(pos >= 0, out, torch.full_like(out, float("nan")))


def user_scores(
    fn: Callable[..., Any], batch: TrajectoryBatch, count: Callable[[int], None]
) -> torch.Tensor:
    """A user-supplied scorer ``fn(observations, actions) -> one score per action`` on each episode;
    ``count(n)`` is told each call. Scores ``[B, K]`` (NaN past the episode's steps)."""

    K = batch.turn_rewards.shape[1]
    out = torch.full((batch.size, K), float("nan"))
    for i in range(batch.size):
        acts = batch.actions[i]
        if not acts or batch.failed[i]:
            continue
        count(1)
        got = [float(x) for x in fn(list(batch.observations[i]), list(acts))]
        if len(got) != len(acts) or not all(math.isfinite(x) for x in got):
            raise ValueError(
                f"advantage.prm.scorer returned {got!r} for {len(acts)} actions: expected one "
                "finite score per action"
            )
        out[i, : len(got)] = torch.tensor(got)
    return out


def step_bce(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Summed BCE of step logits ``[B, K]`` against labels ``[B, K]`` where labelled; and the
    count."""

    labels = labels.to(logits.device)
    has = ~labels.isnan() & ~logits.isnan()
    if not has.any():
        return logits.new_zeros(()), 0
    return F.binary_cross_entropy_with_logits(
        logits[has], labels[has].to(logits), reduction="sum"
    ), int(has.sum())


def log_ratio(phi_logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log pi_phi - log pi_ref on the mask, exactly 0 elsewhere ``[B, T]`` (a token that top-k or
    top-p filtered has log-prob -inf under both: no NaN leaks in from off the mask)."""

    on = mask.to(phi_logp.device) > 0
    return torch.where(on, phi_logp - ref_logp.to(phi_logp), torch.zeros_like(phi_logp))


class ImplicitPRM:
    """PRIME's implicit PRM: pi_phi, a trainable copy of the policy at the warm start.

    ``score(model, batch, grad)`` gives token log-probs ``[B, T]`` (the harness's scoring, the
    same for pi_phi and pi_ref)."""

    def __init__(self, policy, beta: float, lr: float, betas=(0.9, 0.999), weight_decay=0.0):
        self.phi = copy.deepcopy(policy)
        self.phi.eval()
        self.beta = beta
        self.optimizer = torch.optim.AdamW(
            self.phi.parameters(), lr=lr, betas=tuple(betas), weight_decay=weight_decay
        )

    def sequence_logits(
        self, phi_logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """beta sum_t log(pi_phi / pi_ref) over each episode's action tokens ``[B]``: the logit of
        P(outcome = 1)."""

        return self.beta * log_ratio(phi_logp, ref_logp, mask).sum(1)

    def train_step(
        self,
        batch: TrajectoryBatch,
        ref_logp: torch.Tensor,
        score: Callable[..., torch.Tensor],
        micro: int,
        grad_clip: float | None,
    ) -> tuple[torch.Tensor, float]:
        """One optimizer step of BCE(sigma(beta sum log pi_phi/pi_ref), r_o) over the batch (micro-
        batched, mean over episodes). Returns the pre-step sequence logits ``[B]`` and the loss."""

        self.phi.train()
        self.optimizer.zero_grad(set_to_none=True)
        logits, total = [], 0.0
        target = batch.reward.double().clamp(0, 1)
        for s0 in range(0, batch.size, micro):
            rows = list(range(s0, min(batch.size, s0 + micro)))
            sub = batch.select(rows)
            lp = score(self.phi, sub, grad=True)
            z = self.sequence_logits(lp, ref_logp[rows], sub.action_mask)
            loss = F.binary_cross_entropy_with_logits(z, target[rows].to(z), reduction="sum")
            (loss / batch.size).backward()
            logits.append(z.detach().cpu())
            total += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(self.phi.parameters(), grad_clip or float("inf"))
        self.optimizer.step()
        self.phi.eval()
        return torch.cat(logits), total / batch.size

    def state_dict(self) -> dict[str, Any]:
        return {
            "phi": {k: v.detach().cpu().clone() for k, v in self.phi.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.phi.load_state_dict(state["phi"])
        self.optimizer.load_state_dict(state["optimizer"])


def corrupt_step(
    batch: TrajectoryBatch, row: int, turn: int, text: str, tokenizer
) -> tuple[list[int], tuple[int, int], tuple[int, int]]:
    """Episode ``row`` with turn ``turn``'s action replaced by ``text`` (the rest kept): its tokens,
    and the token span of that action in the original and in the corrupted episode."""

    spans = [(s, e) for kind, s, e in batch.segments[row] if kind == "action"]
    s, e = spans[turn]
    n = int(batch.attention_mask[row].sum())
    ids = batch.tokens[row, :n].tolist()
    new = tokenizer(text, add_special_tokens=False)["input_ids"]
    return ids[:s] + new + ids[e:], (s, e), (s, s + len(new))


def intervention(
    prm: ImplicitPRM,
    ref_model,
    batch: TrajectoryBatch,
    task,
    tokenizer,
    score: Callable[..., torch.Tensor],
    probes: int,
    rng: random.Random,
) -> dict[str, float]:
    """The intervention probe: in up to ``probes`` episodes that earned the full reward, one step
    (drawn by ``rng``) is corrupted (``task.corrupt_step``), and the process reward of that step
    (beta sum over its tokens of log pi_phi/pi_ref) is compared before and after. Returns the mean
    drop, the share of probes where it dropped, and the count (0 where no episode could be
    probed)."""

    def probeable(i: int) -> bool:  # a branch row's prefix actions are context, not segments
        spans = sum(kind == "action" for kind, _, _ in batch.segments[i])
        return (
            float(batch.reward[i]) >= 1
            and bool(batch.actions[i])
            and spans == len(batch.actions[i])
        )

    rows = [i for i in range(batch.size) if probeable(i)]
    seqs, spans = [], []
    for i in rows:
        if len(spans) >= 2 * probes:
            break
        k = rng.randrange(len(batch.actions[i]))
        inst = task.make_instance(int(batch.instance_seeds[i]))
        text = task.corrupt_step(inst, k, batch.actions[i][k], rng)
        if text is None or text == batch.actions[i][k]:
            continue
        ids, old, new = corrupt_step(batch, i, k, text, tokenizer)
        n = int(batch.attention_mask[i].sum())
        seqs += [batch.tokens[i, :n].tolist(), ids]
        spans += [old, new]
    if not seqs:
        return {"prime.intervention_n": 0.0}
    T = max(len(x) for x in seqs)
    tokens = torch.zeros(len(seqs), T, dtype=torch.long)
    attn = torch.zeros(len(seqs), T, dtype=torch.long)
    for j, x in enumerate(seqs):
        tokens[j, : len(x)], attn[j, : len(x)] = torch.tensor(x), 1
    probe = SimpleNamespace(tokens=tokens, attention_mask=attn)
    diff = log_ratio(score(prm.phi, probe), score(ref_model, probe), attn).cpu().double()
    at = torch.tensor([diff[j, s:e].sum() for j, (s, e) in enumerate(spans)]) * prm.beta
    drop = at[0::2] - at[1::2]
    return {
        "prime.intervention_drop": float(drop.mean()),
        "prime.intervention_frac": float((drop > 0).double().mean()),
        "prime.intervention_n": float(drop.numel()),
    }


class TreeValue:
    """A value model trained from a search tree: a :class:`StepScorer` head on
    the policy's detached hidden states whose step k predicts the Monte Carlo value of the node
    action k led to (the mean reward of the finished leaves under it), trained by BCE on those soft
    labels. It guides a value-guided search (``data.search.guide: value``)."""

    def __init__(self, policy, lr: float, steps: int, device):
        self.scorer = StepScorer(policy, "shared").to(device)
        self.optimizer = torch.optim.AdamW(self.scorer.model.head.parameters(), lr=lr)
        self.steps, self.device = steps, device

    def scores(self, batch: TrajectoryBatch) -> list[float]:
        """The value ``[B]`` of each partial episode's last node (its last step's sigmoid; 0.5
        where that step has no action token)."""

        with torch.no_grad():
            logits = self.scorer.logits(batch, self.device).float().cpu()
        out = []
        for i in range(batch.size):
            k = int(batch.n_turns[i]) - 1
            x = float(logits[i, k]) if k >= 0 else float("nan")
            out.append(0.5 if math.isnan(x) else 1.0 / (1.0 + math.exp(-x)))
        return out

    def fit(self, batch: TrajectoryBatch, labels: torch.Tensor) -> dict[str, float]:
        """Measure on ``labels [B, K]`` (the tree's node values; NaN: none) before training on
        them (AUC and Brier score of the values against them), then ``steps`` AdamW steps."""

        with torch.no_grad():
            logits = self.scorer.logits(batch, self.device).float().cpu()
        K = min(logits.shape[1], labels.shape[1])
        logits, labels = logits[:, :K], labels[:, :K]
        has = ~labels.isnan() & ~logits.isnan()
        out: dict[str, float] = {"search.value_labels": float(has.sum())}
        if not has.any():
            return out
        p = torch.sigmoid(logits[has])
        out["search.value_brier"] = float(((p - labels[has]) ** 2).mean())
        a = auc(p, labels[has])
        if a is not None:
            out["search.value_auc"] = a
        for _ in range(self.steps):
            self.optimizer.zero_grad()
            loss, n = step_bce(self.scorer.logits(batch, self.device)[:, :K], labels)
            (loss / max(1, n)).backward()
            self.optimizer.step()
        out["search.value_loss"] = float(loss.detach()) / max(1, n)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"head": self.scorer.model.head.state_dict(), "opt": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scorer.model.head.load_state_dict(state["head"])
        self.optimizer.load_state_dict(state["opt"])
