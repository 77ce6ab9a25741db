"""A learned world model of a multi-turn task: a causal LM (a copy of the policy,
trained apart) that predicts the environment's next observation from the episode so far, with a
head for the turn's reward and whether the episode ends. It is trained on real transitions and
imagines episodes: :class:`ImaginedTask` plays the learned model in place of the environment, so
the usual agent loop rolls the policy in it (no verifier, no real environment step).

A transition is the episode's tokens up to the end of action k (``context``), the observation
tokens that followed (``obs``; none where the episode ended), the turn's reward and ``done``.

Shapes: ``N`` transitions, ``L`` padded sequence length, ``H`` hidden size.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ..lora import plain_copy
from ..rollout.agent import encode_observation
from ..rollout.engine import HFEngine, SamplingParams
from ..rollout.trajectory import TrajectoryBatch
from ..tasks.base import Env, Instance, StepResult, Task


@dataclass
class Transition:
    context: list[int]
    obs: list[int]
    reward: float
    done: bool


def transitions(batch: TrajectoryBatch) -> list[Transition]:
    """The real transitions of ``batch``: one per action of every episode that did not fail, except
    the last action of an episode a limit cut (context, generation end, turns without the
    environment ending it): whether and how the environment would have answered is unknown."""

    out = []
    for i in range(batch.size):
        if batch.failed[i]:
            continue
        toks, segs = batch.tokens[i].tolist(), batch.segments[i]
        n = int(batch.n_turns[i])
        acts = [(s, e) for kind, s, e in segs if kind == "action"]
        for k, (_, end) in enumerate(acts[:n]):
            nxt = [(s, e) for kind, s, e in segs if kind == "obs" and s == end]
            done = k == n - 1
            if done and not batch.terminated[i]:  # cut by a limit, not ended by the environment:
                continue  # its end and its next observation are unknown
            obs = toks[nxt[0][0] : nxt[0][1]] if nxt and not done else []
            out.append(Transition(toks[:end], obs, float(batch.turn_rewards[i, k]), done))
    return out


class WorldModel:
    """``p(obs | context)`` by a causal LM, ``reward`` and ``done`` by a head ``[H] -> 2`` on the
    hidden state at the context's last token (the end of the action)."""

    def __init__(self, policy, tokenizer, lr: float, max_obs_tokens: int, device):
        self.lm = plain_copy(policy).to(device)  # LoRA: a plain model of the base's weights
        self.lm.requires_grad_(True)
        self.head = torch.nn.Linear(policy.config.hidden_size, 2).to(device)
        params = [*self.lm.parameters(), *self.head.parameters()]
        self.optimizer = torch.optim.AdamW(params, lr=lr)
        self.tokenizer, self.device, self.max_obs_tokens = tokenizer, device, max_obs_tokens
        self.engine = HFEngine(self.lm, tokenizer)
        self.pad = tokenizer.pad_token_id or 0

    def _losses(self, trs: list[Transition]) -> dict[str, torch.Tensor]:
        """Summed over ``trs``: observation-token NLL (and the token count), reward squared error,
        done BCE, done correct (at logit 0)."""

        seqs = [t.context + t.obs for t in trs]
        L = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), L), self.pad, dtype=torch.long)
        attn = torch.zeros((len(seqs), L), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)], attn[i, : len(s)] = torch.tensor(s), 1
        ids, attn = ids.to(self.device), attn.to(self.device)
        out = self.lm(input_ids=ids, attention_mask=attn, output_hidden_states=True)
        logp = F.log_softmax(out.logits.float(), -1)
        nll, n_tok = logp.new_zeros(()), 0
        last = torch.tensor([len(t.context) - 1 for t in trs], device=self.device)
        for i, t in enumerate(trs):
            if t.obs:  # position p predicts token p + 1
                c = len(t.context)
                target = ids[i, c : c + len(t.obs)]
                nll = nll - logp[i, c - 1 : c - 1 + len(t.obs)].gather(1, target[:, None]).sum()
                n_tok += len(t.obs)
        hidden = out.hidden_states[-1][torch.arange(len(trs), device=self.device), last]
        pred = self.head(hidden.float())
        reward = torch.tensor([t.reward for t in trs], device=self.device)
        done = torch.tensor([float(t.done) for t in trs], device=self.device)
        return {
            "nll": nll,
            "tokens": torch.tensor(float(n_tok)),
            "reward_se": ((pred[:, 0] - reward) ** 2).sum(),
            "reward_ae": (pred[:, 0] - reward).abs().sum(),
            "done_bce": F.binary_cross_entropy_with_logits(pred[:, 1], done, reduction="sum"),
            "done_ok": ((pred[:, 1] > 0).float() == done).float().sum(),
        }

    def fit(self, trs: list[Transition], steps: int, batch_size: int, rng: random.Random) -> float:
        """``steps`` AdamW steps on minibatches of ``trs``; the last minibatch's loss per
        transition (observation NLL per token + reward squared error + done BCE)."""

        loss = torch.zeros(())
        self.lm.train()
        for _ in range(steps):
            mb = rng.sample(trs, min(batch_size, len(trs)))
            got = self._losses(mb)
            loss = got["nll"] / max(1.0, float(got["tokens"])) + (
                got["reward_se"] + got["done_bce"]
            ) / len(mb)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
        self.lm.eval()
        return float(loss.detach())

    @torch.no_grad()
    def measure(
        self, trs: list[Transition], prefix: str = "world_model.heldout"
    ) -> dict[str, float]:
        """Prediction error on ``trs`` (real transitions the model has not trained on): observation
        NLL per token, exact match of the greedy predicted observation, reward MAE, done
        accuracy."""

        if not trs:
            return {}
        got = self._losses(trs)
        n_obs = [t for t in trs if t.obs]
        exact = [self.predict(t.context)[0] == t.obs for t in n_obs]
        out = {
            f"{prefix}_transitions": float(len(trs)),
            f"{prefix}_reward_mae": float(got["reward_ae"]) / len(trs),
            f"{prefix}_done_acc": float(got["done_ok"]) / len(trs),
        }
        if n_obs:
            out[f"{prefix}_obs_nll"] = float(got["nll"]) / float(got["tokens"])
            out[f"{prefix}_obs_exact"] = sum(exact) / len(exact)
        return out

    @torch.no_grad()
    def predict(self, context: list[int]) -> tuple[list[int], float, bool]:
        """The greedy next observation tokens (up to the task's line end), reward, done."""

        ids = torch.tensor([context], device=self.device)
        out = self.lm(input_ids=ids, output_hidden_states=True)
        r, d = self.head(out.hidden_states[-1][0, -1].float()).tolist()
        if d > 0:
            return [], r, True
        params = SamplingParams(0.0, max_new_tokens=self.max_obs_tokens, stop=("\n",))
        gen = self.engine.generate([context], params, n=1)[0][0]
        return list(gen.token_ids), r, False

    def state_dict(self) -> dict[str, Any]:
        return {
            "lm": {k: v.detach().cpu().clone() for k, v in self.lm.state_dict().items()},
            "head": self.head.state_dict(),
            "opt": self.optimizer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.lm.load_state_dict(state["lm"])
        self.head.load_state_dict(state["head"])
        self.optimizer.load_state_dict(state["opt"])


class ImaginedEnv(Env):
    """The learned model in the environment's place: the first observation is the instance's
    prompt (known without acting); every later one, the reward and the end are predicted."""

    def __init__(self, task: ImaginedTask, instance: Instance, verify):
        super().__init__(task, instance, verify)
        self.model, self.tok = task.model, task.tokenizer
        self.context: list[int] = []

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self.turn = 0
        self.context = encode_observation(self.tok, self.instance.prompt, True, self.task)
        return self.instance.prompt, {}

    def step(self, action: str) -> StepResult:
        self.turn += 1
        self.context += self.tok(action, add_special_tokens=False)["input_ids"]
        obs, reward, done = self.model.predict(self.context)
        if not math.isfinite(reward):
            raise ValueError(f"the world model predicted reward {reward}")
        done = done or self.turn >= self.task.max_turns
        text = self.tok.decode(obs, skip_special_tokens=True) if not done else ""
        if not done:
            self.context += obs
        return StepResult(text, reward, done, False, {"imagined": True})


class ImaginedTask(Task):
    """``task`` with its environment replaced by a :class:`WorldModel` (same instances, prompts,
    stop string and turn limit)."""

    def __init__(self, task: Task, model: WorldModel, tokenizer):
        self.real, self.model, self.tokenizer = task, model, tokenizer
        self.params = task.params
        self.name = f"{task.name}[imagined]"
        self.stop = task.stop

    @property
    def max_turns(self) -> int:
        return self.real.max_turns

    def make_instance(self, seed: int) -> Instance:
        return self.real.make_instance(seed)

    def verify(self, instance: Instance, response: str) -> float:
        raise RuntimeError("an imagined episode has no verifier: the world model predicts rewards")

    def make_env(self, instance: Instance, verify) -> Env:
        return ImaginedEnv(self, instance, verify)
