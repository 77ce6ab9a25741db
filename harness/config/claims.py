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
        unknown = sorted(set(v) - set(CRITERION_FIELDS))
        if unknown:
            raise ValueError(
                f"not criterion fields: {', '.join(unknown)} (valid: {', '.join(CRITERION_FIELDS)})"
            )
        return v


class FindingSection(Section):
    claim: str = Field(description="The claim in words.")
    source: str = Field(description="Where it is made: paper, figure or table.")
    about: list[str] = Field(
        min_length=1,
        description="The blanks (or dotted blank fields, or arm keys such as `fault`, "
        "`seed_offset`, `optimizer.lr`) the claim is about; the two arms may differ in nothing else.",
    )
    arm: str = Field(description="The arm the claim is about.")
    than: str = Field(description="The arm it is compared with.")
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
    expect: Literal["larger", "smaller", "equal", "not_smaller", "no_difference"] = Field(
        description="`arm`'s metric is larger / smaller than `than`'s, equal to it within "
        '`smallest_effect`, not smaller by more than `smallest_effect` (a "no worse" claim), or '
        "`no_difference`: the sequential test does not separate the arms (a calibration check "
        "that the harness declares no winner between identical arms; weaker than `equal`)."
    )
    smallest_effect: float = Field(gt=0, description="The smallest difference that matters.")
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
        return {k: data[k] for k in CRITERION_FIELDS}

    def criterion_versions(self) -> list[dict[str, Any]]:
        """Every version of the criterion, the original first and the current last: each
        amendment's ``was`` undone in turn from the newest."""

        versions = [self.criterion()]
        for amendment in reversed(self.amendments):
            was = json_values(amendment.was)
            if isinstance(was.get("seeds"), dict):  # a seed plan written in part: the rest as now
                was["seeds"] = {**versions[0]["seeds"], **was["seeds"]}
            before = {**versions[0], **was}
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

    gap = abs(offset(section.arm) - offset(section.than))
    cap = section.seeds.cap or MOST_SEEDS
    if 0 < gap < cap:
        return [
            f"arms: seed_offset differs by {gap} between '{section.arm}' and '{section.than}', "
            f"less than the seed cap {cap}: seed s of one arm is seed s + {gap} "
            f"of the other, so the arms would share runs; make the offset at least {cap}"
        ]
    return []


def load_finding(path: str | Path) -> Finding:
    """A finding file: its ``finding:`` section checked, the rest checked as an experiment whose two
    arms are the claim's; every problem is named (ConfigError)."""

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: file not found")
    data = parse_yaml(p.read_text(encoding="utf-8"), str(p))
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
        if name is not None and name not in arms:
            problems.append(f"finding.{key}: unknown arm '{name}' (arms: {', '.join(arms)})")
    if section is not None:
        # every budget axis now, not when its turn comes after the others have run
        axes = section.budgets or {}
        problems += budget_problems([(f"finding.budgets.{k}", b) for k, b in axes.items()])
        problems += _shared_seeds(data.get("arms") or {}, section)
        if section.arm == section.than:
            problems.append("finding.than: must differ from finding.arm")
        if set(arms) - {section.arm, section.than}:
            problems.append(
                f"arms: a finding compares two arms ('{section.arm}', '{section.than}'); remove "
                + ", ".join(sorted(set(arms) - {section.arm, section.than}))
            )
    if problems:
        raise ConfigError([f"{p}: {x}" if not x.startswith(str(p)) else x for x in problems])
    return Finding(name=str(data["name"]), finding=section, experiment=data, path=str(p))
