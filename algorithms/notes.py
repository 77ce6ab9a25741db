"""What a filling of the blanks means where frameworks read the same words differently: notes
derived from the values themselves (``sixblanks explain`` prints them under every column, whatever
preset the values came from), and the effective weight each token gets under every normalization
mode on a small example batch. Pure: no I/O."""

from __future__ import annotations

import torch

from .blanks import Blanks
from .normalization import NORMALIZATIONS, loss_weights

EXAMPLE_LENGTHS = ((3, 1), (2, 1))
"""The example batch: two prompts, two samples each, of 3 and 1, and 2 and 1 action tokens (one
turn each); L_max 4."""

EQUIVALENCES = (
    "token-mean weighs every token of the batch alike (1/sum m): a long answer counts by its "
    "length; seq-mean-token-mean weighs every sequence alike (1/(B T_i)).",
    "task-mean (the mean over prompts of their sequences' token-means) equals "
    "seq-mean-token-mean when every group has the same number of sequences (TRL's 'prompt-level "
    "= grpo' claim, which holds for this definition only).",
    "prompt-mean (ScaleRL, SkyRL: a token-mean inside each prompt's group, then the mean over "
    "prompts) equals task-mean only when the sequences of each group have equal lengths, and "
    "token-mean only when the groups have equal token counts: one name, two estimators.",
    "turn-mean equals seq-mean-token-mean on single-turn data.",
    "token-sum has no denominator: its gradient grows with the batch's tokens (B x the mean "
    "length times token-mean's); seq-mean-token-sum grows with the mean length; constant divides "
    "by B L_max (Dr. GRPO), so its scale is fixed by the budget, not by the batch.",
    "Changing the mode changes both the estimator's weighting and the gradient's scale (the "
    "sum of the weights). Under Adam(W) a constant scale cancels except through the gradient "
    "clip (and eps): ladder rung 6 runs each mode also with the clip rescaled by the ratio of the "
    "sums, so a difference that survives it is the weighting's, not the step size's.",
)


def example_weights(l_max: int = 4) -> dict[str, list[float]]:
    """{mode: the weight of one token of each example sequence, in order}, every mode at its
    defaults, on :data:`EXAMPLE_LENGTHS` (sequence i's tokens all get the same weight here)."""

    lengths = [n for group in EXAMPLE_LENGTHS for n in group]
    T = max(lengths)
    mask = torch.zeros(len(lengths), T, dtype=torch.float64)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    groups = torch.tensor([g for g, grp in enumerate(EXAMPLE_LENGTHS) for _ in grp])
    turns = torch.where(mask > 0, 0, -1)
    out = {}
    for mode in NORMALIZATIONS:
        w = loss_weights(mask, mode, l_max, group_ids=groups, turn_ids=turns)
        out[mode] = [float(w[i, 0]) for i in range(len(lengths))]
    return out


def _band(lo: float, hi: float) -> str:
    return f"[{lo:g}, {hi:g}]"


def value_notes(b: Blanks) -> list[str]:
    """Notes on the values of ``b`` that frameworks spell differently."""

    return [
        *_trust_region_notes(b),
        *_sequence_ratio_notes(b),
        *_rollout_correction_notes(b),
        *_loss_notes(b),
    ]


def _trust_region_notes(b: Blanks) -> list[str]:
    """CISPO's cap and DPPO's anchor and truncation, against the frameworks' defaults."""

    w, out = b.weight, []
    if w.trust_region == "cispo":
        band = _band(max(1.0 - w.eps_low, 0.0), 1.0 + w.eps_high)
        out.append(
            f"CISPO weight sg(clip(r, {band})): frameworks' caps are verl [0.8, 1.2] (default), "
            "SkyRL/AReaL/ART/ScaleRL [0, 5], Trinity-RFT [0, 1.28] plus a hard PPO mask, TRL an "
            "absolute min(r, epsilon_high) (unset: 0.2, which scales every token by 0.2)."
        )
    if w.trust_region in ("dppo_tv", "dppo_kl"):
        anchor = (
            "pi_rollout (Stable-RL, SkyRL, prime-rl)" if w.ratio == "behavior" else "pi_old (verl)"
        )
        cap = "none" if w.ratio_cap is None else f"{w.ratio_cap:g}"
        out.append(
            f"DPPO mask anchored on {anchor}, thresholds {w.eps_low:g}/{w.eps_high:g}, ratio "
            f"truncation C = {cap} (verl's effective default is 3, the authors' 10)."
        )
    return out


def _sequence_ratio_notes(b: Blanks) -> list[str]:
    """A sequence ratio's clip bounds (scaled to the measured spread or absolute) and its turns."""

    w, out = b.weight, []
    if w.ratio in ("sequence", "gspo_token") and w.trust_region == "clip":
        if w.clip_scale is not None:
            out.append(
                f"Sequence-ratio clip on the ratio's own scale: eps_low = {w.clip_scale.low:g} "
                f"and eps_high = {w.clip_scale.high:g} times the spread of log s_i, measured "
                "after the run's first optimizer step at the full learning rate and fixed from "
                f"then on (metrics clip_scale.*); eps_low/eps_high ({w.eps_low:g}/"
                f"{w.eps_high:g}) apply only before it (the first minibatch of a step has every "
                "s_i at 1 and clips nothing). Setting eps_low/eps_high does nothing after it."
            )
        else:
            out.append(
                f"Sequence-ratio clip with absolute bounds {w.eps_low:g}/{w.eps_high:g}: a "
                "sequence ratio (a mean of token log-ratios) spreads far less than a token "
                "ratio, and its spread depends on the policy, lengths and learning rate; compare "
                "clip_frac with ratio.seq_logratio_spread, or set weight.clip_scale."
            )
        if w.sequence == "turn":
            out.append(
                "weight.sequence turn: each turn of a multi-turn episode is its own sequence (its "
                "own s and mean advantage); Z still weighs by the normalization mode "
                f"({b.normalization.mode}): normalization turn-mean weighs each turn alike."
            )
    return out


def _rollout_correction_notes(b: Blanks) -> list[str]:
    """A gate on pi_old/pi_rollout (verl bounds its inverse) and the bypass form."""

    w, out = b.weight, []
    g = w.gate
    if g is not None:
        z = {
            "mask": "rejected tokens leave Z (verl's decoupled rejection sampling)",
            "weight": (
                "rejected tokens weigh 0 and stay in Z (IcePop in verl, OpenRLHF, AReaL, TRL)"
            ),
            "clamp": "the ratio is clamped into the band (AReaL's clamp)",
        }[g.mode]
        out.append(
            f"Gate on k = pi_old/pi_rollout ({g.level}, {g.metric}): {z}. verl's 'lo_hi' bounds "
            "apply to 1/k: its '0.6_1.4' is k in [0.714, 1.667] here."
        )
    if w.old_policy == "rollout":
        out.append(
            "Bypass form: pi_old is the rollout's log-probs (no recomputation); corrections read "
            "pi_theta/pi_rollout in each micro-batch and zero tokens without removing them from Z."
        )
    return out


def _loss_notes(b: Blanks) -> list[str]:
    """The per-prompt normalization modes' two meanings, and k3's gradient in the loss."""

    out = []
    n = b.normalization.mode
    if n in ("prompt-mean", "task-mean"):
        out.append(
            f"normalization {n}: "
            + (
                "a token-mean inside each prompt's group, then the mean over prompts (ScaleRL)."
                if n == "prompt-mean"
                else "the mean over prompts of their sequences' token-means (TRL's #5828)."
            )
        )
    if b.regularizer.loss_kl_coef > 0 and b.regularizer.loss_kl_estimator == "k3":
        out.append(
            "KL k3 in the loss: its gradient is the forward KL's; 'k3+' keeps k3's value with the "
            "reverse KL's gradient (verl's low_var_kl+)."
        )
    return out
