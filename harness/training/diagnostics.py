"""Per-step diagnostics that mean the same thing in every arm, whatever its loss normalization (Z),
group filters or objective: logged by the policy-gradient and actor-critic objectives beside their
Z-weighted figures, so that arms can be compared on them.

    entropy_token_mean         plain mean over action tokens of every update of the step of the
                               per-token entropy (the logged ``entropy`` is Z-weighted: arms with
                               another Z log another number for the same batch)
    response_length_correct    mean action tokens of the step's samples with outcome reward > 0
    response_length_incorrect  the same of those with outcome reward <= 0 (each absent when no
                               sample of the step is so)
    trainable_group_frac_kept  share of the groups that entered the gradient (after dynamic
                               sampling, filters and masks) whose rewards are not all equal (absent
                               when G = 1); ``trainable_group_frac`` counts launched groups before
                               any filter

and, where ``rollout.grad_noise_probe`` asks for it, the gradient's noise across steps
(:class:`GradNoiseProbe`: ``grad.sq_norm``, ``grad.noise_to_signal``).
"""

from __future__ import annotations

import torch

from sixblanks.algorithms.data import group_verdicts

ENTROPY_SUM = "entropy_token_sum"
"""The micro-steps' summable entropy figure: ``entropy_token_mean = entropy_token_sum /
action_tokens`` over the step (:data:`.objectives.accumulate.PLAIN_MEANS`)."""


def entropy_token_sum(entropy: torch.Tensor, mask: torch.Tensor) -> float:
    """Sum of the per-token entropy ``[B, T]`` over the action tokens (``mask [B, T]`` > 0), the
    tokens ``action_tokens`` counts."""

    on = mask.to(entropy.device) > 0
    return float(entropy.detach().double()[on].sum())


def lengths_by_outcome(reward: torch.Tensor, action_mask: torch.Tensor) -> dict[str, float]:
    """Mean action tokens of the samples whose outcome reward (``[B]``) is > 0 and of those whose
    is <= 0, from the samples' action masks ``[B, T]`` (as generated, before any filter)."""

    lengths = (action_mask > 0).sum(1).double()
    correct = reward.reshape(-1) > 0
    out: dict[str, float] = {}
    for name, rows in (("correct", correct), ("incorrect", ~correct)):
        if bool(rows.any()):
            out[f"response_length_{name}"] = float(lengths[rows].mean())
    return out


def kept_group_frac(
    reward: torch.Tensor, group_ids: torch.Tensor, mask: torch.Tensor, group_size: int
) -> dict[str, float]:
    """``trainable_group_frac_kept``: among the groups with at least one trained token (``mask
    [B, T]``, the update's), the share whose rows' outcome rewards (``[B]``) are not all equal; {}
    when ``group_size`` is 1 or no group is trained."""

    if group_size <= 1:
        return {}
    verdicts = group_verdicts(reward, group_ids)  # "keep": rewards not all equal
    trained = torch.unique(group_ids[mask.sum(1) > 0]).tolist()
    kept, varied = len(trained), sum(verdicts[g] == "keep" for g in trained)
    return {"trainable_group_frac_kept": varied / kept} if kept else {}


def step_diagnostics(batch, mask: torch.Tensor, group_size: int) -> dict[str, float]:
    """The batch-level diagnostics of a step (``batch``: its TrajectoryBatch; ``mask``: the trained
    mask of the update): lengths by outcome and the kept groups' trainable share, on the true
    rewards (a planted reward fault changes what the update learns from, not these)."""

    return {
        **lengths_by_outcome(batch.reward, batch.action_mask),
        **kept_group_frac(batch.reward, batch.group_ids, mask, group_size),
    }


class GradNoiseProbe:
    """``rollout.grad_noise_probe``: the noise of the policy gradient across a run's steps, for
    comparing estimators (baselines, normalizations) on a frozen policy (``optimizer.lr: 0``), where
    every step's gradient is a fresh draw of the same expectation.

    A step's gradient g_t is the flattened gradient of the policy's trained parameters, before
    clipping, averaged over the step's optimizer steps (one, for one epoch of one minibatch). A
    Welford accumulation over the steps keeps their mean and the per-coordinate sum of squared
    deviations (two copies of the gradient, float64 on the CPU), and each step logs

        grad.sq_norm          ||g_t||^2
        grad.noise_to_signal  tr(Cov) / (||mean||^2 - tr(Cov) / n) over the n steps so far (from
                              the second step): tr(Cov) = sum over coordinates of the unbiased
                              sample variance, the denominator the unbiased estimate of the
                              squared norm of the expected gradient; absent where that estimate
                              is <= 0 (the steps' mean is within their noise of 0: no signal
                              is measured, and the ratio is unbounded)

    The plug-in ||mean||^2 has expectation ||mu||^2 + tr(Cov) / n: with it, the ratio of a gradient
    whose expectation is 0 tends to n, the number of steps, instead of growing without bound.

    Checkpointed with the objective, so a resumed run goes on with the same accumulation."""

    def __init__(self) -> None:
        self.n = 0
        self.mean: torch.Tensor | None = None
        self.m2: torch.Tensor | None = None
        self._sum: torch.Tensor | None = None
        self._parts = 0

    def add_update(self, params) -> None:
        """Before an optimizer step: add the gradient ``params`` hold (None: zeros) to the
        step's."""

        flat = torch.cat(
            [
                (p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1)
                for p in params
            ]
        ).to("cpu", torch.float64)
        self._sum = flat if self._sum is None else self._sum + flat
        self._parts += 1

    def end_step(self) -> dict[str, float]:
        """After the step's update: its gradient (the mean of its optimizer steps') joins the
        accumulation; returns the step's metrics ({} when no optimizer step ran)."""

        if self._sum is None:
            return {}
        g = self._sum / self._parts
        self._sum, self._parts = None, 0
        return self.add(g)

    def add(self, g: torch.Tensor) -> dict[str, float]:
        """One step's flattened gradient ``g``; returns ``grad.sq_norm`` and, from the second step
        on, ``grad.noise_to_signal`` (absent while the estimated squared norm of the expected
        gradient is <= 0)."""

        g = g.to("cpu", torch.float64)
        if self.mean is None or self.m2 is None:
            self.mean, self.m2 = torch.zeros_like(g), torch.zeros_like(g)
        self.n += 1
        delta = g - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (g - self.mean)
        out = {"grad.sq_norm": float(g @ g)}
        if self.n >= 2:
            noise = float(self.m2.sum()) / (self.n - 1)
            # the mean of n draws carries noise / n of squared norm of its own: taken off, the
            # signal is estimated without bias
            signal = float(self.mean @ self.mean) - noise / self.n
            if signal > 0:
                out["grad.noise_to_signal"] = noise / signal
        return out

    def state_dict(self) -> dict:
        copy = lambda t: t.clone() if t is not None else None  # noqa: E731
        return {"n": self.n, "mean": copy(self.mean), "m2": copy(self.m2)}

    def load_state_dict(self, state: dict) -> None:
        self.n = state["n"]
        self.mean, self.m2 = (
            t.clone() if t is not None else None for t in (state["mean"], state["m2"])
        )


def grad_noise_probe(ctx) -> GradNoiseProbe | None:
    """The probe of a run (``ctx``: its RunContext) where ``rollout.grad_noise_probe`` asks for
    it."""

    return GradNoiseProbe() if getattr(ctx.settings.rollout, "grad_noise_probe", False) else None


def trained_params(model) -> list:
    """The parameters the policy's optimizer trains (LoRA: the adapter's), in a fixed order."""

    return [p for p in model.parameters() if p.requires_grad]
