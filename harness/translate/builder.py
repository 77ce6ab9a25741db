"""What a framework configuration determines, setting by setting with the fields it comes from
(:class:`Builder`), and how that becomes a :class:`~.result.Translation` (:func:`finish`): the
closest preset with its overrides, checked as sixblanks would check the arm and the experiment.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import ValidationError

from sixblanks.algorithms.blanks import Blanks
from sixblanks.algorithms.presets import resolve
from sixblanks.algorithms.specs import GateSpec

from ..config.sections import ArmConfig, ModelConfig, RolloutConfig
from ..errors import ConfigError, SixblanksError
from .closest import ORDER, choose, get, same
from .fields import Fields, plain
from .result import Translation

DATA_OFF = (
    ("data.zero_variance_filter", False),
    ("data.retire_pass_rate", None),
    ("data.accuracy_filter", None),
)
"""Data filters neither framework has: off (a preset that turns one on is overridden)."""

GATE_DEFAULTS = GateSpec().model_dump()
"""A gate's fields as written in full when a translation turns one on."""

Setting = tuple[Any, tuple[str, ...]]
"""A value and the framework fields it comes from (each as ``key=value``, see Fields.show)."""


class Builder:
    """What a framework configuration determines, field by field, with its sources."""

    def __init__(self, fields: Fields):
        self.f = fields
        self.target: dict[str, Setting] = {}
        self.rollout: dict[str, Setting] = {}
        self.optimizer: dict[str, Setting] = {}
        self.experiment: dict[str, Setting] = {}
        self.budget_note = ""
        self.lacking: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.prefer: list[str] = []

    def set(self, path: str, value: Any, *sources: str) -> None:
        self.target[path] = (value, tuple(sources))

    def gate(self, sources: Iterable[str], **spec: Any) -> None:
        self.set("weight.gate", {**GATE_DEFAULTS, **spec}, *sources)

    def lacks(self, key: str, reason: str, value: Any = ...) -> None:
        """Record that ``key`` (its value as read, or ``value``) has no sixblanks equivalent."""

        v = self.f.raw(key) if value is ... else value
        if not any(n["field"] == key for n in self.lacking):
            self.lacking.append({"field": key, "value": v, "reason": reason})

    def src(self, *keys: str) -> tuple[str, ...]:
        return tuple(self.f.show(k) for k in keys)

    def updates_per_step(self) -> int:
        """Optimizer updates in one sixblanks step (data.epochs x data.minibatches as set): what
        turns a framework's count of optimizer updates into steps and back."""

        n = 1
        for path in ("data.epochs", "data.minibatches"):
            v = self.target.get(path, (1,))[0]
            n *= v if isinstance(v, int) and v > 0 else 1
        return n


def _rank(path: str) -> int:
    """Where ``path`` comes in the template's order (a sub-spec: its first field)."""

    for i, k in enumerate(ORDER):
        if k == path or k.startswith(path + "."):
            return i
    return len(ORDER)


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    """{dotted path: value} as nested dicts, the paths in the order given."""

    out: dict[str, Any] = {}
    for path, value in flat.items():
        node = out
        *parents, leaf = path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def finish(
    b: Builder,
    framework: str,
    source: str,
    arm_name: str | None,
    blanks_only: bool,
    resolved_notes: Callable[[Blanks], list[str]],
) -> Translation:
    """The translation of what ``b`` holds: the closest preset and its overrides, checked; the
    notes are the builder's, then ``resolved_notes`` of the arm's resolved blanks. Raises
    ConfigError with every problem the fields had."""

    if b.f.problems:
        raise ConfigError(b.f.problems)
    what = f"{source}: the {framework} configuration"
    target = {k: v for k, (v, _) in b.target.items()}
    preset, over = choose(target, b.prefer)
    nested = _nest({p: over[p] for p in sorted(over, key=_rank)})
    rollout = {k: v for k, (v, _) in b.rollout.items() if v is not None}
    optimizer = {k: v for k, (v, _) in b.optimizer.items() if v is not None}
    arm = {"preset": preset, "blanks": nested, "rollout": rollout, "optimizer": optimizer}
    resolved = _checked(arm, target, what)
    mapping = _mapping(b, over)
    notes = [*b.notes, *resolved_notes(resolved)]
    if blanks_only:
        notes.append(
            "--blanks-only: the rollout and optimizer settings in the mapping are left to the "
            "experiment (they are not in the arm)"
        )
        rollout, optimizer = {}, {}
        for m in mapping:
            if m["scope"] == "arm" and m["path"].startswith(("rollout.", "optimizer.")):
                m["override"] = False
    experiment = _nest({path: v for path, (v, _) in b.experiment.items()})
    _check_experiment(experiment, what)
    return Translation(
        framework=framework,
        source=source,
        arm_name=arm_name or f"{framework}_{preset}",
        preset=preset,
        blanks=nested,
        rollout=rollout,
        optimizer=optimizer,
        experiment=experiment,
        budget_note=b.budget_note,
        mapping=mapping,
        not_represented=b.lacking,
        notes=notes,
    )


def _messages(exc: ValidationError) -> list[str]:
    """pydantic's errors as ``loc: message``."""

    return [f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg', '')}" for e in exc.errors()]


def _checked(arm: dict[str, Any], target: dict[str, Any], what: str) -> Blanks:
    """The arm's resolved blanks, refused where sixblanks refuses the arm, and checked to state
    the recipe's every target value (not assumed)."""

    try:
        ArmConfig.model_validate(arm)
        resolved = resolve(arm["preset"], arm["blanks"])
    except ValidationError as exc:
        msgs = "; ".join(m.lstrip(": ") for m in _messages(exc))
        raise SixblanksError(
            f"{what} translates to an arm sixblanks refuses ({msgs}): preset "
            f"'{arm['preset']}' with {json.dumps(plain(arm))}"
        ) from None
    got = resolved.model_dump()
    for path, value in target.items():
        have = get(got, path)
        ok = (
            all(same(have.get(k), v) for k, v in value.items())
            if isinstance(value, dict) and isinstance(have, dict)
            else same(have, value)
        )
        if not ok:
            raise SixblanksError(f"internal: {path} resolves to {have!r}, not {value!r}")
    return resolved


def _check_experiment(experiment: dict[str, Any], what: str) -> None:
    """The experiment's settings as its sections would validate them (a prompt limit of 0, LoRA
    without target modules, a budget of 0 are refused here, naming the configuration)."""

    sections = {"rollout": RolloutConfig, "model": ModelConfig}
    for name, section in sections.items():
        if name not in experiment:
            continue
        try:
            section.model_validate(experiment[name])
        except ValidationError as exc:
            raise SixblanksError(
                f"{what} sets {name} that sixblanks refuses ({'; '.join(_messages(exc))})"
            ) from None
    for counter, limit in experiment.get("budget", {}).items():
        if limit <= 0:
            raise SixblanksError(f"{what} sets budget {counter} {limit}, not a positive limit")


def _mapping(b: Builder, over: dict[str, Any]) -> list[dict[str, Any]]:
    """Every setting the configuration determines, with its sources: the blanks in the template's
    order (``override``: whether it differs from the preset), the arm's rollout and optimizer
    settings, then the experiment's (``scope``: arm or experiment)."""

    def row(path: str, setting: Setting, override: bool, scope: str) -> dict[str, Any]:
        value, sources = setting
        return {
            "path": path,
            "value": value,
            "from": list(sources),
            "override": override,
            "scope": scope,
        }

    mapping = [
        row(p, s, any(k == p or k.startswith(p + ".") for k in over), "arm")
        for p, s in sorted(b.target.items(), key=lambda kv: _rank(kv[0]))
    ]
    for section, values in (("rollout", b.rollout), ("optimizer", b.optimizer)):
        for k, s in values.items():
            if s[0] is not None:
                mapping.append(row(f"{section}.{k}", s, True, "arm"))
    for path, s in b.experiment.items():
        mapping.append(row(path, s, True, "experiment"))
    return mapping
