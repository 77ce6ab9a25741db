"""A finding: a published claim as an experiment file. The file is an ordinary experiment (its arms
differ in exactly the blanks the claim is about) plus a ``finding:`` section that states the claim,
its source, the metric, the expected direction, the smallest effect that matters, the seed plan and
the budget axes to match on."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from ..errors import ConfigError, format_validation_error
from .bases import with_base
from .loading import budget_problems, parse_yaml, resolve_paths, validate_mapping
from .sections import Budget, Section

MOST_SEEDS = 32
"""The most seeds per arm a claim may use (a seed plan's cap, the family's design's too): a seed
offset between two arms of at least this keeps their seeds apart."""


class SeedPlan(Section):
    """Seeds per arm at each look. Left out (the default): the design made for the level the
    claim is decided at (its alpha shared over the family of claims run together), whose every
    look can stop."""

    pilot: int | None = Field(None, ge=2, description="Seeds per arm before the first look.")
    batch: int | None = Field(None, ge=1, description="Seeds per arm added at each later look.")
    cap: int | None = Field(None, ge=2, le=MOST_SEEDS, description="Most seeds per arm.")

    @model_validator(mode="after")
    def _order(self) -> SeedPlan:
        given = [v is not None for v in (self.pilot, self.batch, self.cap)]
        if any(given) and not all(given):
            raise ValueError("give pilot, batch and cap together, or none (the family's design)")
        if self.cap is not None and self.pilot is not None and self.cap < self.pilot:
            raise ValueError(f"cap: must be >= pilot ({self.pilot})")
        return self


CRITERION_FIELDS = (
    "claim",
    "arm",
    "than",
    "metric",
    "aggregate",
    "expect",
    "smallest_effect",
    "alpha",
    "seeds",
    "symmetric",
)
"""What a claim's verdict is decided by, fixed before its data: changing one after a launch needs an
amendment (``finding.amendments``)."""

OPTIONAL_CRITERION = ("arms", "between", "better")
"""Criterion fields of the claim forms beyond two arms (k arms, an interaction between budgets,
which side of a k-arm claim's metric is better): in the criterion, and so in its hash, only where
given, so that a claim that leaves them out hashes as it did before they existed."""

TWO_ARMS = ("larger", "smaller", "equal", "not_smaller", "no_difference")
MANY_ARMS = ("best", "ordering")
INTERACTION = ("grows", "changes_sign")
EXPECTS = TWO_ARMS + MANY_ARMS + INTERACTION


class Amendment(Section):
    was: dict[str, Any] = Field(
        min_length=1,
        description="The criterion's fields as they were before this amendment (e.g. `{expect: "
        "equal}`): the values the claim was first launched with, or after an earlier amendment.",
    )
    reason: str = Field(min_length=10, description="Why the criterion changed, in words.")
    date: str = Field(
        "", description="When the amendment was made (ISO date), and whether before or after data."
    )

    @field_validator("was")
    @classmethod
    def _fields(cls, v: dict[str, Any]) -> dict[str, Any]:
        valid = CRITERION_FIELDS + OPTIONAL_CRITERION
        unknown = sorted(set(v) - set(valid))
        if unknown:
            raise ValueError(
                f"not criterion fields: {', '.join(unknown)} (valid: {', '.join(valid)})"
            )
        return v


class FindingSection(Section):
    claim: str = Field(description="The claim in words.")
    source: str = Field(description="Where it is made: paper, figure or table.")
    about: list[str] = Field(
        min_length=1,
        description="The blanks (or dotted blank fields, or arm keys such as `fault`, "
        "`seed_offset`, `optimizer.lr`) the claim is about; the two arms may differ in nothing "
        "else.",
    )
    arm: str | None = Field(
        None,
        description="The arm the claim is about (two arms, an interaction), or the arm claimed "
        "best (`expect: best`).",
    )
    than: str | None = Field(None, description="The arm it is compared with (two arms).")
    arms: list[str] | None = Field(
        None,
        min_length=3,
        description="A claim over three arms or more: `expect: best` (`arm` beats each other arm) "
        "or `expect: ordering` (the arms in the claimed order, the best first: the largest metric, "
        "or the smallest with `better: lower`); decided from the pairwise comparisons the claim "
        "implies, Holm-adjusted inside the claim.",
    )
    between: list[str] | None = Field(
        None,
        min_length=2,
        max_length=2,
        description="An interaction claim's two budget axes `[B1, B2]` (labels of `budgets`): "
        "`expect: grows` (arm − than grows from B1 to B2 by at least `smallest_effect`) or "
        "`expect: changes_sign` (arm − than is separated from 0 on one side at B1 and on the "
        "other at B2).",
    )
    better: Literal["higher", "lower"] | None = Field(
        None,
        description="A claim over three arms or more: which side of the metric is better, "
        "`higher` (left out: the default) or `lower` (a length, a loss); `best` is then the arm "
        "with the smallest metric and `ordering` lists the smallest first.",
    )
    metric: str = Field(
        "final_score",
        description="`final_score` (the held-out score of each run's last evaluation, paired per "
        "instance) or a per-step training metric (results-schema's metrics table).",
    )
    aggregate: Literal["mean", "last", "slope"] = Field(
        "mean",
        description="A training metric's one value per run: its mean over steps, its last value, "
        "or its least-squares slope per 1000 launched tokens.",
    )
    expect: (
        Literal["larger", "smaller", "equal", "not_smaller", "no_difference"]
        | Literal["best", "ordering", "grows", "changes_sign"]
        | dict[str, Literal["larger", "smaller", "equal", "not_smaller", "no_difference"]]
    ) = Field(
        description="`arm`'s metric is larger / smaller than `than`'s, equal to it within "
        '`smallest_effect`, not smaller by more than `smallest_effect` (a "no worse" claim), or '
        "`no_difference`: the sequential test does not separate the arms (a calibration check "
        "that the harness declares no winner between identical arms; weaker than `equal`). One "
        "of these per budget axis as a mapping (`{small: larger, large: equal}`). Over three "
        "arms or more (`arms`): `best` or `ordering`; between two budgets (`between`): `grows` "
        "or `changes_sign`."
    )
    smallest_effect: float | dict[str, float] = Field(
        description="The smallest difference that matters (> 0); one per budget axis as a "
        "mapping where the expectation is given per axis."
    )
    alpha: float = Field(0.05, gt=0, lt=1, description="Family-wise error over looks.")
    seeds: SeedPlan = SeedPlan()
    symmetric: bool = Field(
        False,
        description="The per-seed differences are known to be symmetric about their mean (e.g. a "
        "held-out score averaged over many instances): the sign-flip test runs exact, without "
        "the allowance that holds its error for skewed differences (every look's level divided "
        "by 8), so fewer seeds can separate the arms. Part of the criterion, fixed before data.",
    )
    budgets: dict[str, Budget] | None = Field(
        None,
        description="Budget axes to match on, by label (e.g. `{steps: {optimizer_steps: 12}, "
        "tokens: {launched_tokens: 24000}}`): one comparison each. None: the experiment's budget.",
    )
    meaning: str = Field("", description="What the verdict means at this scale (for the report).")
    amendments: list[Amendment] = Field(
        default_factory=list,
        description="Changes to the criterion after the claim first ran, oldest first, each with "
        "the fields as they were and the reason; the report shows the verdict under each version.",
    )

    def criterion(self) -> dict[str, Any]:
        """The fields that decide the verdict, as JSON values."""

        data = self.model_dump(mode="json")
        out = {k: data[k] for k in CRITERION_FIELDS}
        out.update({k: data[k] for k in OPTIONAL_CRITERION if data[k] is not None})
        return out

    @property
    def form(self) -> str:
        """``two`` (two arms), ``many`` (best or ordering over k arms) or ``interaction``."""

        if self.expect in MANY_ARMS:
            return "many"
        return "interaction" if self.expect in INTERACTION else "two"

    def expect_at(self, axis: str) -> str:
        """The expectation on budget axis ``axis`` (one for all axes, or the axis's own)."""

        return self.expect[axis] if isinstance(self.expect, dict) else self.expect

    def effect_at(self, axis: str) -> float:
        e = self.smallest_effect
        return float(e[axis] if isinstance(e, dict) else e)

    def claim_arms(self) -> list[str]:
        """The arms the claim names, each once."""

        named = list(self.arms or []) if self.form == "many" else [self.arm, self.than]
        return [a for a in dict.fromkeys(named) if a is not None]

    def criterion_versions(self) -> list[dict[str, Any]]:
        """Every version of the criterion, the original first and the current last: each
        amendment's ``was`` undone in turn from the newest."""

        versions = [self.criterion()]
        for amendment in reversed(self.amendments):
            was = json_values(amendment.was)
            if isinstance(was.get("seeds"), dict):  # a seed plan written in part: the rest as now
                was["seeds"] = {**versions[0]["seeds"], **was["seeds"]}
            before = {**versions[0], **was}
            # an optional field written as null was not given then: absent, as it was hashed
            for k in OPTIONAL_CRITERION:
                if before.get(k, 0) is None:
                    del before[k]
            versions.insert(0, before)
        return versions

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        if not v or v != v.strip():
            raise ValueError("a metric name")
        return v


def json_values(v: dict[str, Any]) -> dict[str, Any]:
    """``v`` with its nested sections as plain JSON values (a seed plan written in YAML)."""

    return json.loads(json.dumps(v, default=str))


def criterion_hash(criterion: dict[str, Any]) -> str:
    """A short content hash of a criterion (sorted-key JSON)."""

    text = json.dumps(criterion, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


class Finding(Section):
    name: str
    finding: FindingSection
    experiment: dict[str, Any]
    path: str = ""


def _shared_seeds(arms: dict[str, Any], section: FindingSection) -> list[str]:
    """A seed offset between the two arms smaller than the seed cap makes one arm's seed s the
    other's seed s + offset: the arms would share runs the claim treats as independent."""

    def offset(arm: str) -> int:
        spec = arms.get(arm)
        value = spec.get("seed_offset", 0) if isinstance(spec, dict) else 0
        return value if isinstance(value, int) else 0

    out = []
    named = section.claim_arms()
    cap = section.seeds.cap or MOST_SEEDS
    for i, a in enumerate(named):
        for b in named[i + 1 :]:
            gap = abs(offset(a) - offset(b))
            if 0 < gap < cap:
                out.append(
                    f"arms: seed_offset differs by {gap} between '{a}' and '{b}', less than the "
                    f"seed cap {cap}: seed s of one arm is seed s + {gap} of the other, so the "
                    f"arms would share runs; make the offset at least {cap}"
                )
    return out


def form_problems(m: FindingSection, arms: list[str]) -> list[str]:
    """What is wrong with the claim's form given the experiment's ``arms``: the fields each form
    needs and those it cannot have, arms the claim names that the experiment lacks, and per-axis
    expectations that do not name the budget axes exactly."""

    out: list[str] = []
    axes = list(m.budgets or {})
    need = {"two": ("arm", "than"), "many": ("arms",), "interaction": ("arm", "than", "between")}
    cannot = {
        "two": ("arms", "between", "better"),
        "many": ("than", "between"),
        "interaction": ("arms", "better"),
    }
    kind = {
        "two": "a two-arm claim",
        "many": f"expect: {m.expect}",
        "interaction": f"an interaction claim (expect: {m.expect})",
    }[m.form]
    out += [f"finding.{k}: {kind} needs it" for k in need[m.form] if getattr(m, k) is None]
    # better orders k arms; two arms and an interaction say their direction by expect and by
    # which arm is `arm`
    why = {"better": " (its expect and `arm` give the direction)"}
    out += [
        f"finding.{k}: not used by {kind}{why.get(k, '')}; remove it"
        for k in cannot[m.form]
        if getattr(m, k) is not None
    ]
    if m.form == "many":
        out += _many_problems(m)
    for name in (m.arms or []) if m.form == "many" else []:
        if name not in arms:
            out.append(f"finding.arms: unknown arm '{name}' (arms: {', '.join(arms)})")
    if m.form == "interaction" and m.between:
        out += [
            f"finding.between: '{b}' is not a budget axis (finding.budgets: "
            f"{', '.join(axes) or 'none'})"
            for b in m.between
            if b not in axes
        ]
        if len(set(m.between)) < 2:
            out.append("finding.between: two different budget axes")
    for key in ("expect", "smallest_effect"):
        v = getattr(m, key)
        if isinstance(v, dict) and set(v) != set(axes):
            named = ", ".join(axes) or "finding.budgets is not given"
            out.append(
                f"finding.{key}: one per budget axis ({named}); given for {', '.join(v) or 'none'}"
            )
    if m.form != "two" and isinstance(m.smallest_effect, dict):
        out.append(f"finding.smallest_effect: one value for {kind}")
    values = (
        m.smallest_effect.values() if isinstance(m.smallest_effect, dict) else [m.smallest_effect]
    )
    if any(not v > 0 for v in values):
        out.append("finding.smallest_effect: must be > 0")
    return out


def _many_problems(m: FindingSection) -> list[str]:
    names = m.arms or []
    out = [f"finding.arms: '{a}' named twice" for a in sorted(set(names)) if names.count(a) > 1]
    if m.expect == "best" and m.arm is None:
        out.append("finding.arm: expect: best needs the arm claimed best")
    elif m.expect == "best" and m.arm not in names:
        out.append(f"finding.arm: '{m.arm}' is not one of finding.arms ({', '.join(names)})")
    if m.expect == "ordering" and m.arm is not None:
        out.append("finding.arm: not used by expect: ordering (finding.arms gives the order)")
    return out


def load_finding(path: str | Path) -> Finding:
    """A finding file: its ``finding:`` section checked, the rest checked as an experiment whose two
    arms are the claim's; every problem is named (ConfigError)."""

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: file not found")
    data = with_base(parse_yaml(p.read_text(encoding="utf-8"), str(p)), p)
    if not isinstance(data, dict) or "finding" not in data:
        raise ConfigError(f"{p}: a finding file needs a 'finding:' section beside the experiment")
    # relative paths (a data file beside the finding) are read from the finding file's directory
    data, problems = resolve_paths(dict(data), p.parent)
    raw = data.pop("finding")
    try:
        section = FindingSection.model_validate(raw)
    except ValidationError as exc:
        problems += format_validation_error(exc, FindingSection, ("finding",))
        section = None
    data.setdefault("name", p.stem)
    try:
        validate_mapping(data, str(p))
    except ConfigError as exc:
        problems += exc.problems
    arms = list(data.get("arms") or {})
    pair = {k: raw.get(k) for k in ("arm", "than")} if isinstance(raw, dict) else {}
    for key, name in pair.items():
        if isinstance(name, str) and name not in arms:
            problems.append(f"finding.{key}: unknown arm '{name}' (arms: {', '.join(arms)})")
    if section is not None:
        problems += form_problems(section, arms)
        # every budget axis now, not when its turn comes after the others have run
        axes = section.budgets or {}
        problems += budget_problems([(f"finding.budgets.{k}", b) for k, b in axes.items()])
        problems += _shared_seeds(data.get("arms") or {}, section)
        named = section.claim_arms()
        if section.form != "many" and section.arm == section.than:
            problems.append("finding.than: must differ from finding.arm")
        if set(arms) - set(named):
            problems.append(
                f"arms: the finding compares {', '.join(repr(a) for a in named)}; remove "
                + ", ".join(sorted(set(arms) - set(named)))
            )
        if section.form == "interaction" and set(axes) - set(section.between or []):
            problems.append(
                "finding.budgets: an interaction claim runs the two axes of finding.between; "
                "remove " + ", ".join(sorted(set(axes) - set(section.between or [])))
            )
    if problems:
        raise ConfigError([f"{p}: {x}" if not x.startswith(str(p)) else x for x in problems])
    return Finding(name=str(data["name"]), finding=section, experiment=data, path=str(p))
