"""What is valid but works against the arm (:func:`cautions`: printed, never refused)."""

from __future__ import annotations

import math

from .check_arms import CheckedArm, resolved_arms
from .experiment_config import ExperimentConfig
from .parallel_checks import parallel_notes

TINY_SEQ_SPREAD = (0.0034, 0.138)
"""The smallest and the largest spread of a sequence's log-ratio (per step, the std over sequences
of mean_t log pi/pi_old) that the golden fixture's ``gspo`` and ``gspo_paper`` runs measured on the
built-in tiny policy (arithmetic, answers of at most 6 tokens, 4 minibatches a batch, learning
rate :data:`TINY_SEQ_SPREAD_LR`); ``tests/test_ratio_scale.py`` keeps them equal to the fixture. A
sequence ratio's spread depends on the policy, the lengths and the learning rate, and a run
measures it only once it updates (``ratio.seq_logratio_spread``): this is the one policy whose
spread is known before anything runs."""
TINY_SEQ_SPREAD_LR = 3e-4
SPREAD_FAR = 10.0
"""A bound below 1/10 of the smallest spread is crossed by almost every sequence that moved that
way (a normal spread leaves 92% of its mass beyond 0.1 sigma); one above 10 times the largest is
crossed by none."""


def _sequence_bound_caution(cfg: ExperimentConfig, arm: CheckedArm) -> str | None:
    """Absolute clip bounds on a sequence ratio far from the spread measured on the built-in tiny
    policy, for an arm that trains that policy at about the learning rate it was measured at and
    updates more than once per batch (with one update every sequence ratio is exactly 1 and no
    bound acts). Another policy's spread is unknown before its run: nothing is said."""

    b, w = arm.blanks, arm.blanks.weight
    if (
        w.ratio not in ("sequence", "gspo_token")
        or w.trust_region != "clip"
        or w.clip_scale is not None
        or b.objective != "pg"
        or b.data.epochs * b.data.minibatches < 2
        or cfg.model.path is not None
        or cfg.model.gguf is not None
        or not 1 / 3 <= cfg.optimizer_for(arm.name).lr / TINY_SEQ_SPREAD_LR <= 3
    ):
        return None
    lo, hi = TINY_SEQ_SPREAD
    far: list[str] = []
    # each bound as the distance of log s_i from 0 at which it clips
    for key, dist, sign, way in (
        ("eps_low", -math.log1p(-w.eps_low) if w.eps_low < 1 else math.inf, "negative", "fell"),
        ("eps_high", math.log1p(w.eps_high), "positive", "rose"),
    ):
        eps = getattr(w, key)
        if dist < lo / SPREAD_FAR:
            far.append(
                f"weight.{key} {eps:g}{_from_preset(arm, key)} is {lo / dist:.0f}x below the "
                f"smallest, so nearly every sequence with a {sign} advantage whose ratio {way} "
                "gets no gradient"
            )
        elif math.isfinite(dist) and dist > hi * SPREAD_FAR:
            far.append(
                f"weight.{key} {eps:g}{_from_preset(arm, key)} is {dist / hi:.0f}x above the "
                f"largest, so it clips no sequence: no trust region for a {sign} advantage"
            )
    if not far:
        return None
    return (
        f"arms.{arm.name}: absolute clip bounds on a sequence ratio far from the spread of its "
        f"log measured on the built-in tiny policy ({lo:g} to {hi:g} a step, on arithmetic at "
        f"learning rate {TINY_SEQ_SPREAD_LR:g}): " + "; ".join(far) + ". Set weight.clip_scale "
        "(preset gspo's {low: 2, high: 2.667}) for bounds at multiples of the spread the run "
        "measures, or compare clip_frac with ratio.seq_logratio_spread after a run"
    )


def _from_preset(arm: CheckedArm, key: str) -> str:
    weight = arm.override.get("weight") or {}
    return "" if key in weight else f" (from preset '{arm.preset}')"


def _heldout_cautions(cfg: ExperimentConfig) -> list[str]:
    """A task whose space holds fewer distinct held-out problems than the evaluation asks for: its
    scores are over that many instances (each problem once), not the requested size; and what a
    task's partition had to give up (a dataset's rows that repeat a held-out prompt)."""

    from ..tasks.registry import make_task

    out: list[str] = []
    for t in cfg.tasks or []:
        try:
            task = make_task(t.name, t.params)
        except Exception:  # noqa: BLE001 - a task that does not build is reported as a problem
            continue
        n = cfg.eval.size or t.eval_size
        split = cfg.eval.split
        try:
            have = {s: task.distinct_available(s, n) for s in ("test", "validation")}
            notes = task.heldout_notes()
        except Exception:  # noqa: BLE001 - a user task's partition that raises: nothing to say
            continue
        if have[split] < n:
            other = "validation" if split == "test" else "test"
            out.append(
                f"task '{t.name}': the evaluation asks for {n} held-out instances (eval.size or "
                f"eval_size) but its space holds {have[split]} distinct {split} problem(s) "
                f"({have[other]} {other}): each evaluation scores those {have[split]}, each once, "
                "so its interval is that wide; a larger space (task.params) holds more"
            )
        out.extend(f"task '{t.name}': {note}" for note in notes)
    return out


def cautions(cfg: ExperimentConfig) -> list[str]:
    """What is valid but works against the arm (settings that the blanks' published variants found
    to hurt): printed by ``validate`` and logged when a run starts, never refused."""

    out: list[str] = []
    for arm in resolved_arms(cfg):
        b, G = arm.blanks, arm.group_size
        weight = arm.override.get("weight") or {}
        if b.weight.clip_scale is not None and {"eps_low", "eps_high"} & set(weight):
            out.append(
                f"arms.{arm.name}: weight.eps_low/eps_high with weight.clip_scale: the bounds are "
                "set from the measured spread after the first update, so these act only before "
                "it (where nothing is clipped); set weight.clip_scale.low/high, or clip_scale: "
                "null for absolute bounds"
            )
        seq = _sequence_bound_caution(cfg, arm)
        if seq is not None:
            out.append(seq)
        if b.objective != "pg" or b.data.source != "rollouts" or b.data.branching is not None:
            continue
        est = b.advantage.estimator
        if est == "batch_mean" and G == 1:
            out.append(
                f"arms.{arm.name}: advantage.estimator 'batch_mean' with one sample per prompt "
                f"({arm.group_path} 1): the baseline is the mean over the whole batch, across "
                "different prompts, so an easy prompt's reward counts as credit; a group of "
                "samples per prompt gives a baseline per prompt"
            )
        if est == "gigpo" and G == 1:
            out.append(
                f"arms.{arm.name}: GiGPO with one sample per prompt ({arm.group_path} 1): its "
                "episode term is 0 (a group of one) and its step term is 0 unless one episode "
                "revisits a state (an anchor group needs two visits): almost every advantage is "
                "0; GiGPO needs a group of episodes per prompt"
            )
        if est == "loo" and G == 2:
            out.append(
                f"arms.{arm.name}: RLOO with 2 samples per prompt ({arm.group_path} 2): each "
                "sample's baseline is the other sample alone, so A = +-(R1 - R2) and the estimate "
                "is as noisy as one reward; use 4 or more samples per prompt"
            )
    return out + _heldout_cautions(cfg) + parallel_notes(cfg)
