"""A finding: a published claim as an experiment file. The file is an ordinary experiment (its arms
differ in exactly the blanks the claim is about) plus a ``finding:`` section that states the claim,
its source, the metric, the expected direction, the smallest effect that matters, the seed plan and
the budget axes to match on."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from ..errors import ConfigError, format_validation_error
from .loading import budget_problems, parse_yaml, resolve_paths, validate_mapping
from .sections import Budget, Section


class SeedPlan(Section):
    pilot: int = Field(3, ge=2, description="Seeds per arm before the first look.")
    batch: int = Field(2, ge=1, description="Seeds per arm added at each later look.")
    cap: int = Field(10, ge=2, description="Most seeds per arm.")

    @model_validator(mode="after")
    def _order(self) -> SeedPlan:
        if self.cap < self.pilot:
            raise ValueError(f"cap: must be >= pilot ({self.pilot})")
        return self


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
    budgets: dict[str, Budget] | None = Field(
        None,
        description="Budget axes to match on, by label (e.g. `{steps: {optimizer_steps: 12}, "
        "tokens: {launched_tokens: 24000}}`): one comparison each. None: the experiment's budget.",
    )
    meaning: str = Field("", description="What the verdict means at this scale (for the report).")

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        if not v or v != v.strip():
            raise ValueError("a metric name")
        return v


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
    if 0 < gap < section.seeds.cap:
        return [
            f"arms: seed_offset differs by {gap} between '{section.arm}' and '{section.than}', "
            f"less than finding.seeds.cap {section.seeds.cap}: seed s of one arm is seed s + {gap} "
            f"of the other, so the arms would share runs; make the offset at least "
            f"{section.seeds.cap}"
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
