"""The six blanks of the policy-gradient template, as typed specs.

    grad J = 1/Z * sum_{i,t} m * w * A * grad log pi(x_{i,t} | h_{i,t})  -  grad R

A named algorithm is a value of :class:`Blanks`. Every field has a default, so a
preset only states what it changes, and an arm in ``experiments.yaml`` may
override any field by its dotted path (``weight.eps_high``).

These are pure data: no torch, no I/O. Unknown fields are rejected so that a
typo in an override never silently falls back to a default.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from .data_specs import (
    DataSpec,
)
from .specs import (
    AdvantageSpec,
    MaskSpec,
    NormalizationSpec,
    RegularizerSpec,
    Spec,
    WeightSpec,
)


class Blanks(Spec):
    """A full filling of the template; a named algorithm is one value of this."""

    objective: Literal["pg", "sft", "dpo"] = Field(
        "pg",
        description=(
            "pg: the policy-gradient template; sft: NLL (w=1, A=1); dpo: offline preference loss."
        ),
    )
    mask: MaskSpec = MaskSpec()
    weight: WeightSpec = WeightSpec()
    advantage: AdvantageSpec = AdvantageSpec()
    normalization: NormalizationSpec = NormalizationSpec()
    regularizer: RegularizerSpec = RegularizerSpec()
    data: DataSpec = DataSpec()

    @model_validator(mode="after")
    def _consistent(self) -> Blanks:
        """Combinations of blanks that cannot work together, each refused naming its key (the
        first found, in the order: weight, data source, advantage and critic, data)."""

        self._weight_consistent()
        self._source_consistent()
        self._advantage_consistent()
        self._data_consistent()
        return self

    def _weight_consistent(self) -> None:
        """The weight blank's fields, checked in this order: the pairs that exclude each other,
        CISPO/DPPO and the bypass form, the sequence ratio's scale, and what the ratio needs."""

        self._weight_pairs_consistent()
        self._weight_forms_consistent()
        self._clip_scale_consistent()
        self._ratio_consistent()

    def _weight_pairs_consistent(self) -> None:
        """Trust regions, truncated IS and gates that exclude each other or need another field."""

        w = self.weight
        if w.trust_region == "sapo" and w.dual_clip_c is not None:
            raise ValueError(
                "weight.dual_clip_c: dual clip applies to trust_region 'clip', not 'sapo'"
            )
        if w.trust_region == "dis" and w.ratio != "behavior":
            raise ValueError(
                "weight.trust_region: 'dis' bands pi_theta/pi_rollout; set weight.ratio: behavior"
            )
        if w.tis_cap is not None and w.ratio == "behavior":
            raise ValueError(
                "weight.tis_cap: ratio 'behavior' already weighs against the behaviour policy; "
                "truncated IS on top would correct twice"
            )
        if (
            w.tis_cap is not None
            and not w.tis_form.endswith("_mask")
            and w.gate is not None
            and w.gate.mode == "clamp"
        ):
            raise ValueError(
                "weight.gate: a clamping gate and truncated IS both weigh by pi_old/pi_behaviour; "
                "use one (or a masking gate, or a mask form of tis)"
            )
        if w.tis_form != "token" and w.tis_cap is None:
            raise ValueError(f"weight.tis_form: '{w.tis_form}' needs weight.tis_cap (the cap C)")
        if w.gate is not None and w.gate.mode == "clamp" and w.gate.metric != "ratio":
            raise ValueError(
                "weight.gate: a KL gate can only mask or weigh (mode: mask or weight), not clamp"
            )
        if w.gate is not None and w.gate.level == "sequence_sum" and w.gate.metric != "ratio":
            raise ValueError(
                "weight.gate.level: 'sequence_sum' bounds the product of the token ratios; use "
                "metric 'ratio' (a KL gate takes level token or sequence)"
            )

    def _clip_scale_consistent(self) -> None:
        """weight.clip_scale: measured on a sequence ratio's first update, critic-free only."""

        w = self.weight
        if w.clip_scale is not None and (
            w.ratio not in ("sequence", "gspo_token") or w.trust_region != "clip"
        ):
            raise ValueError(
                "weight.clip_scale: scales the clip bounds of a sequence ratio; set weight.ratio: "
                "sequence or gspo_token with trust_region: clip (a token ratio's bounds are "
                "eps_low/eps_high)"
            )
        if w.clip_scale is not None and w.old_policy == "rollout":
            raise ValueError(
                "weight.clip_scale: measures how far one update moves the sequence ratio from 1; "
                "in the bypass form (weight.old_policy: rollout) the ratio is to the rollout's "
                "log-probs and starts away from 1, so the spread would mix in the sampler's "
                "mismatch: set absolute eps_low/eps_high"
            )
        if w.clip_scale is not None and self.advantage.estimator == "gae":
            raise ValueError(
                "weight.clip_scale: measured by the critic-free objective only; an actor-critic "
                "arm (advantage.estimator gae) takes absolute eps_low/eps_high"
            )

    def _ratio_consistent(self) -> None:
        """What the chosen ratio supports: a sequence form, a ratio gate's band, a trust region."""

        w = self.weight
        if w.sequence != "trajectory" and w.ratio not in ("sequence", "gspo_token"):
            raise ValueError(
                f"weight.sequence: '{w.sequence}' chooses what a sequence ratio averages over; "
                "set weight.ratio: sequence or gspo_token"
            )
        if w.gate is not None and w.gate.metric == "ratio" and w.gate.low >= w.gate.high:
            raise ValueError("weight.gate: low must be below high")
        if w.ratio == "none" and w.trust_region != "none":
            raise ValueError(
                "weight.trust_region: ratio 'none' (w = 1) has no trust region; "
                "set trust_region: none"
            )

    def _weight_forms_consistent(self) -> None:
        """CISPO and DPPO weigh log pi by a token ratio; the bypass form must not correct twice."""

        w = self.weight
        if w.trust_region in ("cispo", "dppo_tv", "dppo_kl") and w.ratio not in (
            "token",
            "behavior",
        ):
            raise ValueError(
                f"weight.trust_region: '{w.trust_region}' weighs each token's log pi by its own "
                "ratio; set weight.ratio: token (anchor pi_old) or behavior (anchor pi_rollout)"
            )
        if w.ratio_cap is not None and w.trust_region not in ("dppo_tv", "dppo_kl"):
            raise ValueError(
                "weight.ratio_cap: truncates DPPO's detached ratio (trust_region dppo_tv or "
                "dppo_kl); PPO's dual clip is weight.dual_clip_c"
            )
        if w.old_policy != "rollout":
            return
        if w.ratio == "behavior":
            raise ValueError(
                "weight.old_policy: 'rollout' already makes the ratio pi/pi_rollout; keep "
                "weight.ratio: token (ratio 'behavior' is the same ratio without pi_old)"
            )
        if w.ratio != "none" and (
            (w.tis_cap is not None and not w.tis_form.endswith("_mask"))
            or (w.gate is not None and w.gate.mode in ("clamp", "weight"))
        ):
            raise ValueError(
                "weight.tis_cap / weight.gate: with old_policy 'rollout' the ratio is already "
                "pi/pi_rollout; an importance weight pi/pi_rollout on top (truncated IS, a "
                "clamping or weighing gate) corrects twice: use a mask form, a gate in mask mode, "
                "or weight.ratio: none (REINFORCE, as verl's bypass_pg_is and bypass IcePop)"
            )

    def _source_consistent(self) -> None:
        w = self.weight
        source = {
            "pg": ("rollouts", "search"),
            "sft": ("demonstrations", "search"),
            "dpo": ("preference_pairs",),
        }
        if self.data.source not in source[self.objective]:
            raise ValueError(
                f"data.source: objective '{self.objective}' trains on "
                f"{' or '.join(repr(s) for s in source[self.objective])}, not '{self.data.source}'"
            )
        if self.data.source == "search" and self.objective == "pg":
            sp, d = self.data.search, self.data
            if sp.policy == "initial" and w.ratio != "behavior":
                raise ValueError(
                    "data.search.policy: 'initial' samples are off-policy for a policy gradient; "
                    "set weight.ratio: behavior (pi / pi_behaviour, from the carried log-probs)"
                )
            if (
                self.advantage.estimator == "prm"
                and self.advantage.prm.mode in ("sum", "min")
                and sp.mode != "best_of_n"
            ):
                raise ValueError(
                    "advantage.prm.mode: 'sum' and 'min' total each leaf's steps, and a beam or "
                    "tree prefix trains (and is scored) in one leaf only; use mode 'advantage'"
                )
            if d.dynamic_sampling or self.advantage.estimator == "remax" or d.branching:
                raise ValueError(
                    "data.source: 'search' selects its own samples: not with dynamic_sampling, "
                    "ReMax's greedy baseline or data.branching"
                )

    def _advantage_consistent(self) -> None:
        c = self.advantage.critic
        if c.targets == "vtrace" and c.policy_lambda_alpha is not None:
            raise ValueError(
                "advantage.critic.policy_lambda_alpha: SAO's length-adaptive lambda is for GAE "
                "targets, not vtrace"
            )
        if c.targets == "vtrace" and c.rho_bar < c.c_bar:
            raise ValueError("advantage.critic.c_bar: V-trace needs c_bar <= rho_bar")
        if self.advantage.estimator == "gae" and self.objective != "pg":
            raise ValueError("advantage.estimator: 'gae' needs objective 'pg'")
        if self.advantage.estimator == "gae" and (
            self.data.overlong_shaping.enabled
            or self.mask.overlong_filter
            or self.data.potential_shaping.enabled
        ):
            raise ValueError(
                "data.overlong_shaping / potential_shaping / mask.overlong_filter: not "
                "implemented for the critic "
                "(advantage.estimator 'gae'); its rewards and mask would ignore them"
            )

    def _data_consistent(self) -> None:
        """The data blank's fields, checked in this order: the collectors that exclude each other,
        sampling and lag, the prompt pool and its filters, and batch reuse."""

        self._collectors_consistent()
        self._sampling_consistent()
        self._prompt_pool_consistent()
        self._reuse_consistent()

    def _collectors_consistent(self) -> None:
        """Branching and a world model extend the trainer's own online rounds only."""

        if self.data.branching is not None and (
            self.data.concurrent is not None
            or self.data.replay is not None
            or self.advantage.estimator == "remax"
            or self.objective != "pg"
        ):
            raise ValueError(
                "data.branching: branches from the trainer's own rounds (objective pg), not with a "
                "concurrent collector, a replay buffer or ReMax's greedy baseline"
            )
        if self.data.world_model is not None and (
            self.data.source != "rollouts"
            or self.objective != "pg"
            or self.advantage.estimator == "remax"
            or any(
                getattr(self.data, k) is not None
                for k in ("concurrent", "branching", "replay", "self_play")
            )
        ):
            raise ValueError(
                "data.world_model: imagined rounds join the trainer's own online rounds (objective "
                "pg, data.source 'rollouts'), not with ReMax, a concurrent collector, branching, a "
                "replay buffer or self-play"
            )

    def _sampling_consistent(self) -> None:
        """The accuracy filter, staleness and lag, replay and a concurrent collector."""

        band = self.data.accuracy_filter
        if band is not None and (not self.data.dynamic_sampling or not band[0] <= band[1]):
            raise ValueError(
                "data.accuracy_filter: needs data.dynamic_sampling: true (dropped groups are "
                "resampled) and low <= high"
            )
        if self.data.staleness is not None and self.data.lag > self.data.staleness:
            raise ValueError(
                f"data.lag: {self.data.lag} versions exceeds data.staleness {self.data.staleness}: "
                "every sample would be dropped as stale"
            )
        if self.data.replay is not None and (
            self.data.source != "rollouts" or self.advantage.estimator == "remax"
        ):
            raise ValueError(
                "data.replay: only online rollouts can be replayed, and not with ReMax (a replayed "
                "group has no greedy baseline)"
            )
        if self.data.concurrent is not None and (
            self.data.source != "rollouts" or self.advantage.estimator == "remax" or self.data.lag
        ):
            raise ValueError(
                "data.concurrent: only online rollouts can be collected concurrently, not with "
                "ReMax (its greedy baseline runs in the trainer) nor with data.lag (the "
                "deterministic, same-process way to lag: use one of the two)"
            )
        if (self.data.lag or self.data.broadcast_every > 1) and self.data.source != "rollouts":
            raise ValueError("data.lag: only online rollouts (data.source 'rollouts') can lag")

    def _prompt_pool_consistent(self) -> None:
        """Zero-variance filtering, retiring prompts, a curriculum and the prompt pool itself."""

        if self.data.zero_variance_filter and (
            self.data.source != "rollouts" or self.objective != "pg"
        ):
            raise ValueError(
                "data.zero_variance_filter: filters the groups of online rollouts for the policy "
                "gradient (data.source 'rollouts', objective pg)"
            )
        if self.data.zero_variance_filter and self.data.dynamic_sampling:
            raise ValueError(
                "data.zero_variance_filter: dynamic sampling already drops zero-variance groups "
                "(and resamples); use one of the two"
            )
        if self.data.retire_pass_rate is not None and self.data.prompt_pool is None:
            raise ValueError(
                "data.retire_pass_rate: retiring a prompt matters only where prompts recur; set "
                "data.prompt_pool (a fixed pool of N prompts)"
            )
        if self.data.curriculum is not None and self.data.prompt_pool is None:
            raise ValueError(
                "data.curriculum: a pass rate is measured only where prompts recur; set "
                "data.prompt_pool (a fixed pool of N prompts)"
            )
        if self.data.prompt_pool is not None and (
            self.data.source != "rollouts"
            or self.data.concurrent is not None
            or self.data.self_play is not None
        ):
            raise ValueError(
                "data.prompt_pool: drawn by the trainer's own online rounds (data.source "
                "'rollouts'), not by a concurrent collector or self-play"
            )

    def _reuse_consistent(self) -> None:
        """Training on a batch more than once needs an importance ratio (or weight)."""

        w = self.weight
        bypass_is = w.old_policy == "rollout" and (  # verl's bypass_pg_is / bypass IcePop:
            (w.tis_cap is not None and not w.tis_form.endswith("_mask"))  # the weight pi_theta/
            or (w.gate is not None and w.gate.mode in ("clamp", "weight"))  # pi_rollout corrects
        )  # the reuse
        if self.data.epochs * self.data.minibatches > 1 and w.ratio == "none" and not bypass_is:
            raise ValueError(
                "data.epochs: reusing a batch (epochs x minibatches > 1) needs an importance "
                "ratio; weight.ratio is 'none' (or, in the bypass form, an importance weight: "
                "weight.old_policy: rollout with weight.tis_cap or a weighing gate)"
            )


BLANK_NAMES: tuple[str, ...] = (
    "mask",
    "weight",
    "advantage",
    "normalization",
    "regularizer",
    "data",
)


def flatten(blanks: Blanks) -> dict[str, Any]:
    """Blanks as a flat {dotted.path: value} dict (for diffs, tables, MLflow params)."""

    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            out[prefix] = value

    walk("", blanks.model_dump(context={"every_field": True}))  # unset optional fields too
    return out


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Recursively merge ``override`` into a copy of ``base`` (override wins)."""

    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
