"""Other frameworks' configurations read as sixblanks arms (``sixblanks translate``): a TRL
``GRPOConfig`` or a verl actor/algorithm configuration becomes a preset with blank, rollout and
optimizer overrides. A field absent from the input takes that framework's documented default, so
the translation shows what the defaults imply; every field with no sixblanks equivalent is named
with the reason, fields the reader does not know are reported as unknown, and the framework's
known traps are listed with whether the given configuration triggers them.

No torch here (the blanks and presets it resolves are pydantic data). The defaults are those of huggingface/trl@f2cd577 (2026-07-24, with
transformers 5.24's ``TrainingArguments``) and verl-project/verl@1dda039 (2026-08-22); the
comments cite the file and line each one is read from.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sixblanks.algorithms.blanks import Blanks, flatten
from sixblanks.algorithms.presets import PRESETS, resolve
from sixblanks.algorithms.specs import GateSpec

from ..errors import ConfigError, SixblanksError, suggest
from .sections import ArmConfig, ModelConfig, RolloutConfig

FRAMEWORKS = ("trl", "verl")

SOURCES = {
    "trl": "huggingface/trl@f2cd577 (trl/trainer/grpo_config.py, grpo_trainer.py)",
    "verl": "verl-project/verl@1dda039 (verl/trainer/config/_generated_ppo_trainer.yaml, "
    "verl/workers/config/actor.py, verl/trainer/ppo/core_algos.py)",
}

# --------------------------------------------------------------------------- the result


@dataclass(frozen=True)
class Trap:
    """A known trap of a framework: its id, one line on what goes wrong, whether the configuration
    read triggers it and why (or why not)."""

    id: str
    summary: str
    fired: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "summary": self.summary, "fired": self.fired, "detail": self.detail}


@dataclass
class Translation:
    """A framework configuration as a sixblanks arm, with what could not be carried over.

    ``blanks``, ``rollout`` and ``optimizer`` are the arm's overrides; ``mapping`` lists every
    sixblanks setting the configuration determines (``override``: whether it differs from the
    preset) with the framework fields it comes from (a field marked ``(default)`` was absent and
    took the framework's default); ``not_represented``: {field, value, reason} of each setting
    sixblanks cannot express; ``unknown``: {field, hint} of each field the reader does not know;
    ``ignored``: {field: why} of the fields read that have no effect on the update (logging,
    parallelism, I/O, options of a setting not chosen).

    ``experiment``: settings the configuration determines that an experiment file holds for every
    arm, not an arm (``rollout.max_prompt_tokens``, the ``budget``, ``model.lora``), nested as in
    the file; ``budget_note``: how the framework's run length became that budget, or why it did not
    (a length counted in passes over a dataset whose size the configuration does not hold)."""

    framework: str
    source: str
    arm_name: str
    preset: str
    blanks: dict[str, Any]
    rollout: dict[str, Any]
    optimizer: dict[str, Any]
    experiment: dict[str, Any] = field(default_factory=dict)
    budget_note: str = ""
    mapping: list[dict[str, Any]] = field(default_factory=list)
    not_represented: list[dict[str, Any]] = field(default_factory=list)
    unknown: list[dict[str, Any]] = field(default_factory=list)
    ignored: dict[str, str] = field(default_factory=dict)
    traps: list[Trap] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def arm(self) -> dict[str, Any]:
        """The arm as it goes under ``arms:`` of an experiment file (empty sections left out)."""

        out: dict[str, Any] = {"preset": self.preset}
        for key in ("blanks", "rollout", "optimizer"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out

    @property
    def fired(self) -> list[Trap]:
        return [t for t in self.traps if t.fired]

    def to_dict(self) -> dict[str, Any]:
        return {
            "framework": self.framework,
            "source": self.source,
            "defaults_from": SOURCES[self.framework],
            "arm": {self.arm_name: _plain(self.arm())},
            "experiment": _plain(self.experiment),
            "budget_note": self.budget_note,
            "preset": self.preset,
            "mapping": _plain(self.mapping),
            "not_represented": _plain(self.not_represented),
            "unknown": self.unknown,
            "ignored": self.ignored,
            "traps": [t.to_dict() for t in self.traps],
            "notes": self.notes,
        }

    def to_yaml(self) -> str:
        """The arm as YAML (paste it under ``arms:``), then the report as YAML comments."""

        head = [
            f"# {self.framework} configuration {self.source} as a sixblanks arm (preset {self.preset})",
            f"# defaults: {SOURCES[self.framework]}",
            "# paste under arms: of an experiment file; sixblanks explain -c FILE "
            f"{self.arm_name} shows its blanks",
        ]
        body = yaml.safe_dump(
            {self.arm_name: _plain(self.arm())}, sort_keys=False, default_flow_style=False
        )
        lines = head + body.rstrip("\n").split("\n")
        lines += self._experiment_lines()
        lines.append("#")
        lines.append(
            "# mapping (sixblanks <- framework; (default): absent, the framework's default):"
        )
        for m in self.mapping:
            mark = "" if m["override"] else "  (= preset)"
            if m.get("scope") == "experiment":
                mark = "  (the experiment's)"
            lines.append(f"#   {m['path']}: {_show(m['value'])}  <- {', '.join(m['from'])}{mark}")
        lines += self._report_lines()
        return "\n".join(lines) + "\n"

    def _experiment_lines(self) -> list[str]:
        """The experiment's settings as commented YAML, and how the run length became a budget."""

        lines = ["#"]
        if self.experiment:
            lines.append(
                "# the experiment's settings (shared by every arm: they go in the experiment "
                "file, not under arms:):"
            )
            text = yaml.safe_dump(
                _plain(self.experiment), sort_keys=False, default_flow_style=False
            )
            lines += [f"#   {line}" for line in text.rstrip("\n").split("\n")]
        if self.budget_note:
            lines.append(f"# budget: {self.budget_note}")
        return lines if len(lines) > 1 else []

    def _report_lines(self) -> list[str]:
        """What is not represented, unknown and ignored, the traps and the notes, as comments."""

        lines = ["#"]
        if self.not_represented:
            lines.append("# not represented (no sixblanks equivalent; the arm differs here):")
            for n in self.not_represented:
                lines.append(f"#   {n['field']}={_show(n['value'])}: {n['reason']}")
        else:
            lines.append("# not represented: nothing")
        if self.unknown:
            lines.append(f"# unknown fields (not {self.framework} configuration fields; not read):")
            for u in self.unknown:
                lines.append(f"#   {u['field']}{': ' + u['hint'] if u['hint'] else ''}")
        if self.ignored:
            lines.append("# ignored (no effect on the update), by the reason:")
            by_why: dict[str, list[str]] = {}
            for name, why in self.ignored.items():
                by_why.setdefault(why, []).append(name)
            for why, names in by_why.items():
                lines.append(f"#   {why}: {', '.join(names)}")
        lines.append("#")
        lines.append("# traps ([x]: this configuration triggers it):")
        for t in self.traps:
            lines.append(f"#   [{'x' if t.fired else ' '}] {t.id}: {t.summary}")
            lines.append(f"#       {t.detail}")
        for note in self.notes:
            lines.append(f"# note: {note}")
        return lines


def _plain(x: Any) -> Any:
    """Tuples as lists (YAML and JSON both), recursively."""

    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    return x


def _show(v: Any) -> str:
    return json.dumps(_plain(v)) if not isinstance(v, str) else repr(v)


# --------------------------------------------------------------------------- reading a file


def read_fields(path: str | Path, framework: str) -> dict[str, Any]:
    """The configuration in ``path`` as {field: value}: a YAML or JSON mapping (verl's nested
    sections are flattened to dotted keys, as on verl's command line), or verl command-line
    overrides (``key=value``, one per line or a YAML list of them). An empty file is an empty
    configuration: every field takes its default. Raises ConfigError naming the file."""

    from .loading import read_text_file

    text = read_text_file(path, f"a {framework} configuration file")
    return parse_fields(text, framework, str(path))


def parse_fields(text: str, framework: str, source: str = "<input>") -> dict[str, Any]:
    """:func:`read_fields` on text."""

    if framework not in FRAMEWORKS:
        raise ConfigError(f"unknown framework '{framework}' (valid: {', '.join(FRAMEWORKS)})")
    if source.endswith(".json"):
        try:
            data = json.loads(text) if text.strip() else None
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"{source}: JSON syntax error at line {exc.lineno}, column {exc.colno}: {exc.msg}"
            ) from None
    else:
        from .loading import parse_yaml

        data = parse_yaml(text, source)
    if data is None:
        return {}
    if isinstance(data, str) and "=" in data:
        data = data.split()
    if isinstance(data, list) and data and all(isinstance(x, str) for x in data):
        return _overrides(data, source)
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: expected a mapping of {framework} configuration fields (or verl-style "
            f"key=value overrides), got {type(data).__name__}"
        )
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise ConfigError(f"{source}: field names must be strings (got {bad[0]!r})")
    if framework == "trl":
        return dict(data)
    out: dict[str, Any] = {}
    _flatten_into(out, "", data, source)
    return out


def _flatten_into(out: dict[str, Any], prefix: str, data: dict[str, Any], source: str) -> None:
    for k, v in data.items():
        key = f"{prefix}.{str(k).lstrip('+')}" if prefix else str(k).lstrip("+")
        if isinstance(v, dict) and v:
            _flatten_into(out, key, v, source)
        elif key in out:
            raise ConfigError(f"{source}: field '{key}' is given twice (nested and dotted)")
        else:
            out[key] = v


def _overrides(items: list[str], source: str) -> dict[str, Any]:
    """verl/Hydra command-line overrides ``[+]key=value`` (shell line continuations dropped)."""

    out: dict[str, Any] = {}
    if not any("=" in item for item in items):
        raise ConfigError(f"{source}: no key=value override in {' '.join(items)[:80]!r}")
    for item in items:
        item = item.strip()
        if not item or item == "\\":
            continue
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            out[item] = None  # a launcher's word (python3 -m ...): reported as unknown
            continue
        try:
            parsed = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError:
            parsed = value
        out[key.strip().lstrip("+~")] = parsed
    return out


# --------------------------------------------------------------------------- values with defaults


class _Fields:
    """A configuration's fields with the framework's defaults behind them: reads record which
    fields were used; a malformed value is collected as a problem (every one at once)."""

    def __init__(self, given: dict[str, Any], defaults: dict[str, Any], source: str):
        self.given_values, self.defaults, self.source = given, defaults, source
        self.problems: list[str] = []

    def given(self, key: str) -> bool:
        return key in self.given_values

    def raw(self, key: str) -> Any:
        if key in self.given_values:
            v = self.given_values[key]
            return None if isinstance(v, str) and v.strip() in ("null", "None", "~", "") else v
        return self.defaults.get(key)

    def show(self, key: str) -> str:
        """``key=value`` as read, ``(default)`` when absent from the input."""

        return f"{key}={_show(self.raw(key))}" + ("" if self.given(key) else " (default)")

    def _bad(self, key: str, what: str) -> None:
        self.problems.append(f"{self.source}: {key}: {self.raw(key)!r} is not {what}")

    def num(self, key: str) -> float | None:
        v = self.raw(key)
        if v is None:
            return None
        if isinstance(v, bool):
            self._bad(key, "a number")
            return None
        try:
            return float(v)
        except (TypeError, ValueError):
            self._bad(key, "a number")
            return None

    def whole(self, key: str) -> int | None:
        v = self.num(key)
        if v is None:
            return None
        if not v.is_integer():
            self._bad(key, "a whole number")
            return None
        return int(v)

    def flag(self, key: str) -> bool:
        v = self.raw(key)
        if isinstance(v, bool):
            return v
        if isinstance(v, str) and v.strip().lower() in ("true", "false"):
            return v.strip().lower() == "true"
        if v in (0, 1):
            return bool(v)
        if v is None:
            return False
        self._bad(key, "true or false")
        return False

    def text(self, key: str, valid: Iterable[str] | None = None) -> str | None:
        v = self.raw(key)
        if v is None:
            return None
        v = str(v)
        if valid is not None and v not in valid:
            valid = sorted(valid)
            self.problems.append(
                f"{self.source}: {key}: unknown value '{v}'{suggest(v, valid)} "
                f"(valid: {', '.join(valid)})"
            )
        return v


# --------------------------------------------------------------------------- building an arm


_ORDER = list(flatten(Blanks()))
"""Every blank field in the order of the template (objective, mask, weight, ...)."""

KIND = (
    "objective",
    "weight.ratio",
    "weight.trust_region",
    "weight.old_policy",
    "weight.gate",
    "advantage.estimator",
)
"""Fields that name an algorithm's kind (the gate: whether there is one): a preset that differs in
one of them is a worse match than one that differs in several numbers."""

GROUP_MEAN = frozenset({"group_norm", "group_mean", "group_mean_batch_std"})
"""The group-mean estimators: the group's baseline, scaled by the group's std, by nothing or by the
batch's std. For the family a framework's loss names (its preferred presets) a change between them
is a scale, as a denominator is, and costs one field: TRL's loss_type and scale_rewards are separate
settings, and loss_type 'dr_grpo' with a std kept is Dr. GRPO with one of its two changes undone
(the dr_grpo_half trap), not Lite PPO or GRPO under another name. For any other preset the
estimator stays a kind field (a group-std recipe under a token-mean is GRPO's, not Lite PPO's)."""

CANDIDATES = (
    "grpo",
    "dr_grpo",
    "dapo",
    "lite_ppo",
    # frameworks state absolute clip bounds: the GSPO presets that keep them absolute
    "gspo_paper",
    "gspo_token_paper",
    "sapo",
    "cispo",
    "dppo",
    "icepop",
    "scalerl",
    "rloo",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "remax",
    "ppo",
    "reinforce",
    "reinforce_baseline",
    "reinforce_loo",
)
"""Presets a translation may start from (those registered), in order of preference on a tie."""

_DATA_OFF = (
    ("data.zero_variance_filter", False),
    ("data.retire_pass_rate", None),
    ("data.accuracy_filter", None),
)
"""Data filters neither framework has: off (a preset that turns one on is overridden)."""

GATE_DEFAULTS = GateSpec().model_dump()
"""A gate's fields as written in full when a translation turns one on."""


class _Builder:
    """What a framework configuration determines, field by field, with its sources."""

    def __init__(self, fields: _Fields):
        self.f = fields
        self.target: dict[str, tuple[Any, tuple[str, ...]]] = {}
        self.rollout: dict[str, tuple[Any, tuple[str, ...]]] = {}
        self.optimizer: dict[str, tuple[Any, tuple[str, ...]]] = {}
        self.experiment: dict[str, tuple[Any, tuple[str, ...]]] = {}
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


def _get(tree: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return None
        tree = tree[part]
    return tree


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
    return a == b


def _overrides_for(dump: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    """{dotted path: value} of the target values that differ from the preset's ``dump``; a
    sub-spec (the gate) the preset also has differs field by field."""

    out: dict[str, Any] = {}
    for path, value in target.items():
        have = _get(dump, path)
        if isinstance(value, dict) and isinstance(have, dict):
            for k, v in value.items():
                if not _same(have.get(k), v):
                    out[f"{path}.{k}"] = v
        elif not _same(have, value):
            out[path] = value
    return out


def _rank(path: str) -> int:
    """Where ``path`` comes in the template's order (a sub-spec: its first field)."""

    for i, k in enumerate(_ORDER):
        if k == path or k.startswith(path + "."):
            return i
    return len(_ORDER)


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in sorted(flat, key=_rank):
        node = out
        *parents, leaf = path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = flat[path]
    return out


def _cost(path: str, have: Any, value: Any, preferred: bool) -> int:
    """What overriding ``path`` from ``have`` to ``value`` costs a preset's match: ten for a field
    of the algorithm's kind, one for a number; a preferred preset's estimator within GROUP_MEAN is
    a scale, one."""

    if path == "advantage.estimator" and preferred and {have, value} <= GROUP_MEAN:
        return 1
    return 10 if path in KIND else 1


def _choose(target: dict[str, Any], prefer: list[str]) -> tuple[str, dict[str, Any]]:
    """The registered preset closest to ``target`` (fewest overrides, a kind field counting ten)
    and its overrides, ``prefer`` first on a tie. Only presets of the target's kind compete: the
    same trust region; a gate, if the preset has one, of the same level, metric and mode; the
    same estimator where the preset's needs a second model or rollout (gae, remax)."""

    order = list(dict.fromkeys([*prefer, *CANDIDATES]))
    best: tuple[int, int, str, dict[str, Any]] | None = None
    gate = target.get("weight.gate")
    for i, name in enumerate(order):
        if name not in PRESETS:
            continue
        dump = PRESETS[name].blanks.model_dump()
        if _get(dump, "weight.trust_region") != target.get("weight.trust_region"):
            continue
        have = _get(dump, "weight.gate")
        if have is not None and not (
            isinstance(gate, dict) and all(have[k] == gate[k] for k in ("level", "metric", "mode"))
        ):
            continue
        estimator = _get(dump, "advantage.estimator")
        if estimator in ("gae", "remax") and estimator != target.get("advantage.estimator"):
            continue
        over = _overrides_for(dump, target)
        score = sum(_cost(p, _get(dump, p), v, name in prefer) for p, v in over.items())
        if best is None or (score, i) < best[:2]:
            best = (score, i, name, over)
    if best is None:  # none of this trust region (dppo_kl): the preferred family's, else grpo
        name = next((p for p in prefer if p in PRESETS), "grpo")
        return name, _overrides_for(PRESETS[name].blanks.model_dump(), target)
    return best[2], best[3]


def _finish(
    b: _Builder,
    framework: str,
    source: str,
    arm_name: str | None,
    blanks_only: bool,
) -> Translation:
    if b.f.problems:
        raise ConfigError(b.f.problems)
    target = {k: v for k, (v, _) in b.target.items()}
    preset, over = _choose(target, b.prefer)
    nested = _nest(over)
    rollout = {k: v for k, (v, _) in b.rollout.items() if v is not None}
    optimizer = {k: v for k, (v, _) in b.optimizer.items() if v is not None}
    arm = {"preset": preset, "blanks": nested, "rollout": rollout, "optimizer": optimizer}
    resolved = _checked(arm, target, f"{source}: the {framework} configuration")
    mapping = _mapping(b, over)
    notes = list(b.notes)
    if framework == "trl" and resolved.weight.ratio != "none":
        notes.append(
            "TRL does not clamp log r before exp; the arm keeps the preset's "
            f"weight.log_ratio_clamp {resolved.weight.log_ratio_clamp:g}, which binds only "
            "beyond it"
        )
    if blanks_only:
        notes.append(
            "--blanks-only: the rollout and optimizer settings in the mapping are left to the "
            "experiment (they are not in the arm)"
        )
        rollout, optimizer = {}, {}
        for m in mapping:
            if m["scope"] == "arm" and m["path"].startswith(("rollout.", "optimizer.")):
                m["override"] = False
    experiment: dict[str, Any] = {}
    for path, (v, _) in b.experiment.items():
        *parents, leaf = path.split(".")
        node = experiment
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = v
    _check_experiment(experiment, f"{source}: the {framework} configuration")
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


def _checked(arm: dict[str, Any], target: dict[str, Any], what: str) -> Blanks:
    """The arm's resolved blanks, refused where sixblanks refuses the arm, and checked to state
    the recipe's every target value (not assumed)."""

    try:
        ArmConfig.model_validate(arm)
        resolved = resolve(arm["preset"], arm["blanks"])
    except ValidationError as exc:
        msgs = "; ".join(
            f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg', '')}".lstrip(": ")
            for e in exc.errors()
        )
        raise SixblanksError(
            f"{what} translates to an arm sixblanks refuses ({msgs}): preset "
            f"'{arm['preset']}' with {json.dumps(_plain(arm))}"
        ) from None
    got = resolved.model_dump()
    for path, value in target.items():
        have = _get(got, path)
        ok = (
            all(_same(have.get(k), v) for k, v in value.items())
            if isinstance(value, dict) and isinstance(have, dict)
            else _same(have, value)
        )
        if not ok:
            raise SixblanksError(f"internal: {path} resolves to {have!r}, not {value!r}")
    return resolved


def _check_experiment(experiment: dict[str, Any], what: str) -> None:
    """The experiment's settings as its sections would validate them (a prompt limit of 0, LoRA
    without target modules, a budget of 0 are refused here, naming the configuration)."""

    sections = {"rollout": RolloutConfig, "model": ModelConfig}
    try:
        for name, section in sections.items():
            if name in experiment:
                section.model_validate(experiment[name])
    except ValidationError as exc:
        msgs = "; ".join(
            f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg', '')}" for e in exc.errors()
        )
        raise SixblanksError(f"{what} sets {name} that sixblanks refuses ({msgs})") from None
    for counter, limit in experiment.get("budget", {}).items():
        if limit <= 0:
            raise SixblanksError(f"{what} sets budget {counter} {limit}, not a positive limit")


def _mapping(b: _Builder, over: dict[str, Any]) -> list[dict[str, Any]]:
    """Every setting the configuration determines, with its sources: the blanks in the template's
    order (``override``: whether it differs from the preset), the arm's rollout and optimizer
    settings, then the experiment's (``scope``: arm or experiment)."""

    mapping = [
        {
            "path": p,
            "value": v,
            "from": list(s),
            "override": any(k == p or k.startswith(p + ".") for k in over),
            "scope": "arm",
        }
        for p, (v, s) in sorted(b.target.items(), key=lambda kv: _rank(kv[0]))
    ]
    for section, values in (("rollout", b.rollout), ("optimizer", b.optimizer)):
        for k, (v, s) in values.items():
            if v is not None:
                mapping.append(
                    {
                        "path": f"{section}.{k}",
                        "value": v,
                        "from": list(s),
                        "override": True,
                        "scope": "arm",
                    }
                )
    for path, (v, s) in b.experiment.items():
        mapping.append(
            {"path": path, "value": v, "from": list(s), "override": True, "scope": "experiment"}
        )
    return mapping


def _unknown(
    names: Iterable[str], known: Callable[[str], bool], vocabulary: Iterable[str], what: str
) -> list[dict[str, Any]]:
    """{field, hint} of each name ``known`` refuses, with the closest known name when one is."""

    vocab = sorted(set(vocabulary))
    return [
        {"field": n, "hint": suggest(n, vocab).lstrip("; ") or f"not a {what} field"}
        for n in names
        if not known(n)
    ]


# --------------------------------------------------------------------------- shared traps

_TRAP_TEXT = {
    "cispo_cap": "CISPO's clip differs by framework: TRL caps absolutely, min(r, epsilon_high), "
    "and epsilon_high unset is epsilon = 0.2, scaling every token's gradient by at most 0.2 "
    "(5.0 recommended); verl's default band is [1-clip_ratio_low, 1+clip_ratio_high] = [0.8, 1.2]; "
    "SkyRL/ScaleRL/AReaL/ART use [0, 5]; Trinity [0, 1.28] with a hard mask. sixblanks' cispo "
    "band is [1-eps_low, 1+eps_high].",
    "batch_std": "'Batch std' has two meanings: TRL scale_rewards='batch' (and ROLL's Lite PPO) "
    "divide by the std of the raw rewards about the batch mean; AReaL's group/batch "
    "normalization and ScaleRL by the std of the group-centred rewards (sixblanks "
    "advantage.batch_std: rewards | centered).",
    "off_policy_uncorrected": "An off-policy ratio with no correction: rollouts come from another "
    "engine (vLLM/SGLang) or lag the trainer, the ratio is pi/pi_old with pi_old recomputed by the "
    "trainer, and nothing weighs pi_old/pi_rollout (TRL vllm_importance_sampling_correction, verl "
    "algorithm.rollout_correction).",
    "default_aggregation": "The framework's default loss aggregation sets the gradient's scale: "
    "TRL defaults to loss_type 'dapo' (token-mean over the step's tokens), TRL 'grpo' and the GRPO "
    "paper average per sequence (seq-mean-token-mean), verl defaults to token-mean; porting a "
    "recipe across them re-weighs every token by its sequence's length (a ~10x gradient-norm "
    "gap is reported in AI-Hypercomputer/maxtext#4025).",
    "dr_grpo_half": "Dr. GRPO is two changes: no std in the advantage AND a constant denominator; "
    "setting one of them (TRL loss_type='dr_grpo' keeps scale_rewards='group' unless told; verl "
    "needs norm_adv_by_std_in_grpo=false and loss_agg_mode=seq-mean-token-sum-norm) gives half of it.",
    "gspo_clip_range": "A sequence-level (GSPO) ratio with a token-level clip range: the GSPO paper "
    "clips the geometric-mean ratio at 3e-4/4e-4; the frameworks' defaults (0.2) clip almost "
    "nothing.",
}


def _trap(tid: str, fired: bool, detail: str) -> Trap:
    return Trap(tid, _TRAP_TEXT[tid], fired, detail)


# --------------------------------------------------------------------------- TRL

# trl/trainer/grpo_config.py@f2cd577 (GRPOConfig) and transformers 5.24 TrainingArguments, which
# GRPOConfig subclasses through trl/trainer/base_config.py; line numbers are grpo_config.py's.
TRL_DEFAULTS: dict[str, Any] = {
    "learning_rate": 1e-6,  # :418 (TrainingArguments: 5e-5)
    "num_generations": 8,  # :474
    "max_completion_length": 512,  # :488
    "generation_batch_size": None,  # :511
    "steps_per_generation": None,  # :518 (None: gradient_accumulation_steps, :1083)
    "temperature": 1.0,  # :522
    "top_p": 1.0,  # :526
    "top_k": 0,  # :533
    "min_p": None,  # :540
    "generation_kwargs": None,  # :547
    "repetition_penalty": 1.0,  # :563
    "use_vllm": False,  # :577
    "vllm_structured_outputs_regex": None,  # :609
    "beta": 0.0,  # :671
    "num_iterations": 1,  # :679
    "epsilon": 0.2,  # :683
    "delta": None,  # :687
    "epsilon_high": None,  # :695 (None: epsilon, grpo_trainer.py:921)
    "sapo_temperature_neg": 1.05,  # :704
    "sapo_temperature_pos": 1.0,  # :712
    "importance_sampling_level": "token",  # :750
    "reward_weights": None,  # :760
    "multi_objective_aggregation": "sum_then_normalize",  # :767
    "scale_rewards": "group",  # :779
    "loss_type": "dapo",  # :791
    "mask_truncated_completions": False,  # :826
    "sync_ref_model": False,  # :834
    "top_entropy_quantile": 1.0,  # :856
    "entropy_coef": 0.0,  # :866
    "use_adaptive_entropy": False,  # :876
    "vllm_importance_sampling_correction": True,  # :915
    "vllm_importance_sampling_mode": "sequence_mask",  # :924
    "vllm_importance_sampling_clip_max": 3.0,  # :937
    "vllm_importance_sampling_clip_min": None,  # :945
    "off_policy_mask_threshold": None,  # :953
    "use_bias_correction_kl": False,  # :962
    "vllm_importance_sampling_cap": None,  # :1026 (deprecated alias of clip_max)
    "cast_lm_head_to_fp32": False,  # :454
    # transformers.TrainingArguments 5.24: the run's length (max_steps > 0 overrides the epochs)
    "max_steps": -1,
    "num_train_epochs": 3.0,
    # trl/trainer/model_config.py@f2cd577 (ModelConfig), which `trl grpo --config` files mix in
    "dtype": "float32",  # :89
    "use_peft": False,  # :103
    "lora_r": 16,  # :107
    "lora_alpha": 32,  # :111
    "lora_dropout": 0.05,  # :115
    "lora_target_modules": None,  # :119 (None: peft's modules for the architecture)
    "load_in_8bit": False,  # :152
    "load_in_4bit": False,  # :156
    "neftune_noise_alpha": None,  # TrainingArguments (Trainer.train turns NEFTune on)
    # transformers.TrainingArguments 5.24 (training_args.py)
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "weight_decay": 0.0,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-8,
    "max_grad_norm": 1.0,
    "warmup_steps": 0,
    "lr_scheduler_type": "linear",
    "optim": "adamw_torch_fused",
    "use_liger_kernel": False,  # base_config.py (the loss then runs in Liger's fused kernel)
}

_TRL_IGNORED = {
    "logging and progress output": "logging_strategy logging_steps logging_first_step "
    "log_on_each_node logging_nan_inf_filter include_num_input_tokens_seen log_level "
    "log_level_replica disable_tqdm report_to run_name project trackio_space_id trackio_bucket_id "
    "trackio_static_space_id log_completions log_multimodal num_completions_to_print "
    "log_unique_prompts log_completions_hub_repo skip_memory_metrics debug",
    "checkpoints, uploads and resuming": "output_dir save_only_model save_strategy save_steps "
    "save_on_each_node save_total_limit enable_jit_checkpoint push_to_hub hub_token "
    "hub_private_repo hub_model_id hub_strategy hub_always_push hub_revision "
    "load_best_model_at_end metric_for_best_model greater_is_better ignore_data_skip "
    "restore_callback_states_from_checkpoint resume_from_checkpoint",
    "evaluation during training (sixblanks scores the task's held-out split, eval.*)": "eval_strategy "
    "eval_steps eval_delay per_device_eval_batch_size prediction_loss_only eval_on_start "
    "eval_do_concat_batches eval_use_gather_object eval_accumulation_steps include_for_metrics "
    "batch_eval_metrics num_generations_eval do_train do_eval do_predict",
    "speed, memory and parallelism: the same update computed another way": "ds3_gather_for_generation "
    "pad_to_multiple_of cache_implementation vllm_mode vllm_model_impl vllm_enable_sleep_mode "
    "vllm_server_base_url vllm_server_host vllm_server_port vllm_server_timeout vllm_group_port "
    "vllm_gpu_memory_utilization vllm_max_model_length vllm_tensor_parallel_size "
    "use_transformers_continuous_batching transformers_continuous_batching_config "
    "use_transformers_paged average_tokens_across_devices gradient_checkpointing "
    "gradient_checkpointing_kwargs activation_checkpointing activation_checkpointing_kwargs "
    "torch_compile torch_compile_backend torch_compile_mode liger_kernel_config use_cache "
    "torch_empty_cache_steps auto_find_batch_size use_cpu accelerator_config parallelism_config "
    "dataloader_num_workers dataloader_pin_memory dataloader_persistent_workers "
    "dataloader_prefetch_factor dataloader_multiprocessing_context dataloader_in_order "
    "ddp_find_unused_parameters ddp_bucket_cap_mb ddp_broadcast_buffers ddp_static_graph "
    "ddp_backend ddp_timeout fsdp fsdp_config deepspeed local_rank attn_implementation",
    "mixed precision: the same update up to rounding (sixblanks computes in model.dtype)": "bf16 fp16 "
    "bf16_full_eval fp16_full_eval tf32",
    "the model, the data and the rewards: the experiment's model and task": "model_init_kwargs "
    "trust_remote_code model_name_or_path model_revision dataset_name dataset_config "
    "dataset_train_split dataset_test_split reward_funcs reward_model_name_or_path "
    "chat_template_kwargs max_tool_calling_iterations remove_unused_columns label_names "
    "lora_task_type",
    "seeds and data order: each run is seeded from the experiment's seeds": "seed data_seed "
    "full_determinism shuffle_dataset dataloader_drop_last train_sampling_strategy "
    "length_column_name",
    "read only with loss_type 'vespo' (named when set)": "vespo_k_pos vespo_lambda_pos vespo_k_neg "
    "vespo_lambda_neg",
    "read only with use_adaptive_entropy (named when set)": "entropy_coef_min entropy_coef_max "
    "entropy_coef_delta entropy_target",
    "read only with sync_ref_model (named when set)": "ref_model_mixup_alpha ref_model_sync_steps",
    "options of lr_scheduler_type and optim (named when they act)": "lr_scheduler_kwargs optim_args "
    "optim_target_modules",
    "not read by GRPOTrainer, which computes its own loss": "label_smoothing_factor",
    "the load-balancing loss TRL adds for mixture-of-experts models (x this coefficient); sixblanks "
    "adds none: a difference on MoE models only": "router_aux_loss_coef",
    "dropout off in the policy: no effect on models without dropout (most current LLMs)": "disable_dropout",
}
"""GRPOConfig fields (grpo_config.py@f2cd577, transformers 5.24 TrainingArguments, and the
ScriptArguments and ModelConfig fields `trl grpo --config` files mix in) that do not change the
update, by the reason (``ignored`` in the report). Fields that can change it are read instead
(``_trl_unsupported``) and named when they act."""

TRL_IGNORED_WHY = {name: why for why, names in _TRL_IGNORED.items() for name in names.split()}
TRL_OTHER_FIELDS = frozenset(TRL_IGNORED_WHY)

TRL_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
TRL_IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def _trl(b: _Builder, world_size: int | None) -> list[Trap]:
    f = b.f
    loss = f.text("loss_type", TRL_LOSS_TYPES) or "dapo"
    level = f.text("importance_sampling_level", ("token", "sequence")) or "token"
    scale = f.raw("scale_rewards")
    scale = {True: "group", False: "none"}.get(scale, scale)  # grpo_config.py:1076
    if scale not in ("group", "batch", "none"):
        f.problems.append(
            f"{f.source}: scale_rewards: unknown value {scale!r} (valid: group, batch, none)"
        )
    G = f.whole("num_generations") or 0
    if G and G < 2:
        f.problems.append(f"{f.source}: num_generations: TRL needs at least 2 (got {G})")
    if loss == "luspo" and level != "sequence":
        f.problems.append(
            f"{f.source}: loss_type: 'luspo' needs importance_sampling_level='sequence' "
            "(grpo_trainer.py:891)"
        )
    eps = f.num("epsilon") or 0.2
    eps_high = f.num("epsilon_high")
    eps_high = eps if eps_high is None else eps_high  # grpo_trainer.py:921
    ratio = "sequence" if level == "sequence" else "token"
    lvl = ("importance_sampling_level",)
    b.prefer = {"dr_grpo": ["dr_grpo"], "dapo": ["dapo"], "cispo": ["cispo"], "sapo": ["sapo"]}.get(
        loss, ["grpo"]
    )

    # w: the ratio and its trust region (grpo_trainer.py:3055-3110)
    if loss == "cispo":
        if ratio == "sequence":
            b.lacks(
                "importance_sampling_level",
                "sixblanks' cispo weighs each token by its own ratio; the arm uses the token ratio",
            )
            ratio = "token"
        b.set("weight.ratio", ratio, *b.src("loss_type", *lvl))
        b.set("weight.trust_region", "cispo", *b.src("loss_type"))
        cap_src = b.src("epsilon_high" if f.given("epsilon_high") else "epsilon", "loss_type")
        if eps_high > 1:
            b.set("weight.eps_low", 1.0, *cap_src)  # min(r, cap) has no lower bound: r > 0
            b.set("weight.eps_high", eps_high - 1.0, *cap_src)
        else:
            b.lacks(
                "epsilon_high" if f.given("epsilon_high") else "epsilon",
                f"TRL's CISPO weight is min(r, {eps_high:g}), a cap below 1 that scales every "
                "on-policy token's gradient by "
                f"{eps_high:g}; sixblanks' band [1-eps_low, 1+eps_high] ends above 1: the arm "
                "uses cispo's [0, 5] (eps_low 1, eps_high 4), the recommended epsilon_high=5.0",
                eps_high,
            )
            b.set("weight.eps_low", 1.0, *cap_src)
            b.set("weight.eps_high", 4.0, *cap_src)
    elif loss == "sapo":
        b.set("weight.ratio", ratio, *b.src(*lvl))
        b.set("weight.trust_region", "sapo", *b.src("loss_type"))
        b.set("weight.tau_pos", f.num("sapo_temperature_pos"), *b.src("sapo_temperature_pos"))
        b.set("weight.tau_neg", f.num("sapo_temperature_neg"), *b.src("sapo_temperature_neg"))
    else:
        if loss == "vespo":
            b.lacks(
                "loss_type",
                "VESPO's gamma weighting of the sequence ratio has no sixblanks "
                "trust region; the arm uses PPO's clip",
                "vespo",
            )
        b.set("weight.ratio", ratio, *b.src(*lvl))
        b.set("weight.trust_region", "clip", *b.src("loss_type"))
        b.set("weight.eps_low", eps, *b.src("epsilon"))
        b.set("weight.eps_high", eps_high, *b.src("epsilon_high", "epsilon"))
        delta = f.num("delta")
        if delta is not None and delta > 1 + eps_high:
            # -min(min(r, delta) A, clip(r) A) is PPO's dual clip at c = delta when delta > 1+eps
            b.set("weight.dual_clip_c", delta, *b.src("delta"))
        else:
            if delta is not None:
                b.lacks(
                    "delta",
                    f"two-sided clipping at delta <= 1+epsilon_high "
                    f"({1 + eps_high:g}) caps the ratio of positive advantages too; "
                    "sixblanks' dual clip acts on negative advantages above 1+eps only",
                )
            b.set("weight.dual_clip_c", None, *b.src("delta"))
    b.set("weight.ratio_cap", None, *b.src("loss_type"))
    b.set("weight.old_policy", "recomputed", *b.src("use_vllm"))
    b.set("weight.target_kl", None, *b.src("loss_type"))
    _trl_vllm(b)

    # A (grpo_trainer.py:2687-2707): group mean, std with Bessel's correction (trainer/utils.py:857)
    agg = f.raw("multi_objective_aggregation")
    if agg != "sum_then_normalize":
        b.lacks(
            "multi_objective_aggregation",
            "several reward functions normalized one by one "
            "before their weighted sum: a sixblanks task has one reward",
        )
    if f.raw("reward_weights") is not None:
        b.lacks(
            "reward_weights",
            "weights of several reward functions: a sixblanks task has one "
            "reward (a task combining rewards computes it)",
        )
    src = b.src("scale_rewards")
    if scale == "batch":
        b.set("advantage.estimator", "group_mean_batch_std", *src)
        b.set("advantage.batch_std", "rewards", *src)
    else:
        b.set("advantage.estimator", "group_mean" if scale == "none" else "group_norm", *src)
    if scale != "none":
        b.set("advantage.std_ddof", 1, *src)
        b.set("advantage.std_eps", 1e-4, *src)

    # Z (grpo_trainer.py:3124-3148)
    ls = b.src("loss_type")
    mode = {
        "grpo": "seq-mean-token-mean",
        "sapo": "seq-mean-token-mean",
        "dr_grpo": "constant",
        "luspo": "seq-mean-token-sum",
    }.get(loss, "token-mean")
    b.set("normalization.mode", mode, *ls)
    if mode != "token-mean":
        b.set("normalization.count_empty_rows", True, *ls)  # mask.sum(-1).clamp(min=1)
    if mode == "constant":
        b.set("normalization.l_max", None, *b.src("max_completion_length"))
        b.notes.append(
            "loss_type 'dr_grpo' divides by B x max_completion_length: normalization.l_max "
            "unset is the rollout's max_new_tokens, set from max_completion_length"
        )
    if loss == "bnpo":
        b.lacks(
            "loss_type",
            "'bnpo' takes a token-mean per local micro-batch, then averages "
            "them over gradient_accumulation_steps; sixblanks' token-mean is over the "
            "optimizer step's batch (equal with one micro-batch per step)",
            "bnpo",
        )
    if loss == "luspo":
        b.notes.append(
            "loss_type 'luspo' scales each sequence's loss by its length: GSPO's "
            "sequence ratio with seq-mean-token-sum"
        )

    # R (grpo_trainer.py:3069-3076: k3 in the loss)
    beta = f.num("beta") or 0.0
    b.set("regularizer.loss_kl_coef", beta, *b.src("beta"))
    if beta > 0:
        b.set("regularizer.loss_kl_estimator", "k3", *b.src("beta"))
    b.set("regularizer.reward_kl_coef", 0.0, *b.src("beta"))
    b.set("regularizer.entropy_coef", f.num("entropy_coef") or 0.0, *b.src("entropy_coef"))
    for key, reason in (
        (
            "use_adaptive_entropy",
            "an entropy coefficient adapted to a target entropy: sixblanks' coefficient is fixed",
        ),
        (
            "use_bias_correction_kl",
            "the KL term weighted by the importance ratio: sixblanks' KL term is not",
        ),
        (
            "sync_ref_model",
            "a reference policy mixed with the current one every few steps: "
            "sixblanks' reference is the initial policy, fixed",
        ),
    ):
        if f.flag(key):
            b.lacks(key, reason)
    if (f.num("entropy_coef") or 0.0) > 0 and mode != "token-mean":
        b.lacks(
            "entropy_coef",
            "TRL's entropy bonus is a token-mean whatever the loss_type "
            f"(grpo_config.py:866); sixblanks aggregates it as the loss ({mode})",
        )
    if (f.num("top_entropy_quantile") or 1.0) < 1.0:
        b.lacks(
            "top_entropy_quantile",
            "training only the highest-entropy tokens: no sixblanks mask selects tokens by entropy",
        )
    if f.raw("off_policy_mask_threshold") is not None:
        b.lacks(
            "off_policy_mask_threshold",
            "DeepSeek-V3.2's off-policy sequence mask (A < 0 "
            "and KL > delta): sixblanks' gates do not look at the advantage's sign",
        )
    if f.flag("use_liger_kernel"):
        b.lacks(
            "use_liger_kernel",
            "the loss runs in Liger's fused kernel, not TRL's reference "
            "loss: the same formula, not checked here (and it refuses "
            "top_entropy_quantile and off-policy masking)",
        )
    if f.given("use_liger_loss"):
        b.lacks(
            "use_liger_loss", "removed from GRPOConfig (trl#4364) in favour of use_liger_kernel"
        )

    # m
    b.set(
        "mask.overlong_filter",
        f.flag("mask_truncated_completions"),
        *b.src("mask_truncated_completions"),
    )

    # (i): batches (grpo_config.py:1080-1115, grpo_trainer.py:1208-1275)
    _trl_batches(b, G, world_size)
    b.set("data.dynamic_sampling", False, *b.src("loss_type"))
    b.set("data.overlong_shaping.enabled", False, *b.src("loss_type"))
    for path, off in _DATA_OFF:
        b.set(path, off, *b.src("loss_type"))

    # rollout and optimizer
    _trl_rollout(b)
    _trl_optimizer(b)
    return _trl_traps(b, loss, eps_high, ratio, scale)


def _trl_vllm(b: _Builder) -> None:
    """TRL's correction of vLLM's sampling (grpo_trainer.py:2579-2624, applied at :3117)."""

    f = b.f
    keys = ("use_vllm", "vllm_importance_sampling_correction", "vllm_importance_sampling_mode")
    if not (f.flag("use_vllm") and f.flag("vllm_importance_sampling_correction")):
        b.set("weight.tis_cap", None, *b.src(*keys[:2]))
        b.set("weight.gate", None, *b.src(*keys[:2]))
        set_is = [k for k in TRL_DEFAULTS if k.startswith("vllm_importance") and f.given(k)]
        if set_is and not f.flag("use_vllm"):
            b.notes.append(f"{', '.join(set_is)}: no effect without use_vllm")
        return
    mode = f.text("vllm_importance_sampling_mode", TRL_IS_MODES) or "sequence_mask"
    cmax_key = (
        "vllm_importance_sampling_cap"
        if f.raw("vllm_importance_sampling_cap") is not None
        else "vllm_importance_sampling_clip_max"
    )
    cmax, cmin = f.num(cmax_key), f.num("vllm_importance_sampling_clip_min")
    src = b.src(*keys, cmax_key, "vllm_importance_sampling_clip_min")
    level = "token" if mode.startswith("token") else "sequence_sum"
    if cmax is None:
        b.lacks(
            cmax_key,
            "an importance weight bounded only from below: sixblanks' "
            "corrections need an upper bound; the arm has none",
        )
        b.set("weight.tis_cap", None, *src)
        b.set("weight.gate", None, *src)
        return
    if mode.endswith("truncate"):
        if cmin is None:  # clamp(max=C): truncated IS
            b.set("weight.tis_cap", cmax, *src)
            b.set("weight.tis_form", "token" if level == "token" else "sequence", *src)
            b.set("weight.gate", None, *src)
        else:  # clamp(min, max): a clamping gate
            b.set("weight.tis_cap", None, *src)
            b.gate(src, level=level, metric="ratio", mode="clamp", low=cmin, high=cmax)
        return
    low = cmin if cmin is not None else 0.0
    if level == "token":  # k kept in [low, high], 0 outside, every token in Z: IcePop's weight
        b.set("weight.tis_cap", None, *src)
        b.gate(src, level="token", metric="ratio", mode="weight", low=low, high=cmax)
        return
    # sequence_mask: the sequence ratio prod_t k_t where it is in [low, high], else 0, every
    # token staying in Z: a weighing gate on the product
    b.set("weight.tis_cap", None, *src)
    b.gate(src, level="sequence_sum", metric="ratio", mode="weight", low=low, high=cmax)


def _trl_batches(b: _Builder, G: int, world_size: int | None) -> None:
    f = b.f
    W = world_size or 1
    if world_size is None:
        b.notes.append(
            "the number of processes is not a GRPOConfig field: assumed 1 (--world-size N "
            "multiplies the batch sizes)"
        )
    pdbs = f.whole("per_device_train_batch_size") or 0
    ga = f.whole("gradient_accumulation_steps") or 1
    gbs, spg = f.whole("generation_batch_size"), f.whole("steps_per_generation")
    mu = f.whole("num_iterations") or 1
    if not (pdbs and G):
        return
    if gbs is not None and spg is not None:
        f.problems.append(
            f"{f.source}: generation_batch_size and steps_per_generation: TRL takes one of the "
            "two (grpo_config.py:1104)"
        )
        return
    if gbs is None:
        spg = spg or ga
        gbs = pdbs * W * spg
    elif gbs % (pdbs * W):
        f.problems.append(
            f"{f.source}: generation_batch_size: {gbs} is not a multiple of "
            f"per_device_train_batch_size x processes ({pdbs * W})"
        )
        return
    if gbs % G:
        f.problems.append(
            f"{f.source}: generation_batch_size: {gbs} sequences are not whole groups of "
            f"num_generations {G} (grpo_config.py:1128)"
        )
        return
    step = pdbs * W * ga
    keys = (
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "steps_per_generation",
        "generation_batch_size",
        "num_generations",
    )
    src = b.src(*keys)
    b.set("data.group_size", G, *b.src("num_generations"))
    b.set("data.epochs", mu, *b.src("num_iterations"))
    if gbs >= step:
        k, r = divmod(gbs, step)
        if r:
            b.lacks(
                "steps_per_generation",
                f"a generation batch of {gbs} sequences is not a "
                f"whole number of optimizer batches of {step}: the arm splits it into {k}",
            )
        b.set("data.minibatches", max(1, k), *src)
        b.rollout["prompts_per_step"] = (gbs // G, src)
    else:
        b.set("data.minibatches", 1, *src)
        b.rollout["prompts_per_step"] = (step // G, src)
        b.lacks(
            "steps_per_generation",
            f"one optimizer step accumulates {step // gbs} generation batches of {gbs} "
            "sequences (their advantages normalized apart); sixblanks samples the step's "
            f"{step} sequences in one round",
        )


def _trl_rollout(b: _Builder) -> None:
    f = b.f
    t = f.num("temperature")
    if t is not None and t > 0:
        b.rollout["temperature"] = (t, b.src("temperature"))
    else:
        b.lacks("temperature", "sixblanks samples with a temperature > 0")
    b.rollout["top_p"] = (f.num("top_p"), b.src("top_p"))
    b.rollout["top_k"] = (f.whole("top_k") or 0, b.src("top_k"))
    b.rollout["max_new_tokens"] = (f.whole("max_completion_length"), b.src("max_completion_length"))
    if b.rollout["max_new_tokens"][0] is None:
        del b.rollout["max_new_tokens"]
        b.lacks("max_completion_length", "no limit: sixblanks needs max_new_tokens")
    if f.raw("min_p") is not None:
        b.lacks("min_p", "min-p sampling: the sixblanks samplers have temperature, top_p, top_k")
    if (f.num("repetition_penalty") or 1.0) != 1.0:
        b.lacks("repetition_penalty", "no repetition penalty in sixblanks' samplers")
    if f.raw("generation_kwargs"):
        b.lacks("generation_kwargs", "extra sampling arguments are not carried over")
    if f.raw("vllm_structured_outputs_regex"):
        b.lacks("vllm_structured_outputs_regex", "constrained decoding is not carried over")
    if f.flag("use_vllm"):
        b.notes.append(
            "use_vllm: rollouts come from vLLM; set rollout.backend: vllm in the "
            "experiment to sample with another engine than the trainer's"
        )
    _trl_experiment(b)


def _trl_experiment(b: _Builder) -> None:
    """The experiment's settings a TRL configuration holds: the prompt limit, the model's dtype,
    LoRA, a float32 LM head."""

    f = b.f
    if f.given("max_prompt_length"):  # GRPOConfig's until TRL 0.28: prompts cut to it
        n = f.whole("max_prompt_length")
        if n is None:
            b.lacks(
                "max_prompt_length",
                "no limit: TRL kept whole prompts; sixblanks bounds a prompt and its history "
                "by the experiment's rollout.max_prompt_tokens (set it above the longest prompt)",
            )
        else:
            b.experiment["rollout.max_prompt_tokens"] = (n, b.src("max_prompt_length"))
    dkey = "dtype" if f.given("dtype") or not f.given("torch_dtype") else "torch_dtype"
    dtype = f.text(dkey)
    if f.given(dkey) and dtype in ("float32", "bfloat16", "float16"):
        b.experiment["model.dtype"] = (dtype, b.src(dkey))
    elif f.given(dkey) and dtype is not None:
        b.notes.append(
            f"{dkey}={dtype!r}: the checkpoint's own dtype; sixblanks' model.dtype is the "
            "experiment's (float32 unless it says otherwise)"
        )
    if f.flag("cast_lm_head_to_fp32"):
        b.experiment["model.fp32_lm_head"] = (True, b.src("cast_lm_head_to_fp32"))
    if f.flag("use_peft"):
        _trl_lora(b)
    if f.flag("load_in_4bit") or f.flag("load_in_8bit"):
        key = "load_in_4bit" if f.flag("load_in_4bit") else "load_in_8bit"
        b.lacks(key, "a quantized base model (QLoRA): sixblanks loads the weights in model.dtype")
    if f.raw("neftune_noise_alpha") is not None:
        b.lacks(
            "neftune_noise_alpha",
            "NEFTune's noise on the input embeddings in training forwards: sixblanks adds none",
        )


def _trl_lora(b: _Builder) -> None:
    """``use_peft``: LoRA adapters from TRL's ModelConfig fields (trl/trainer/utils.py
    get_peft_config) as the experiment's model.lora."""

    f = b.f
    keys = ("use_peft", "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules")
    lora: dict[str, Any] = {
        "r": f.whole("lora_r"),
        "alpha": f.num("lora_alpha"),
        "dropout": f.num("lora_dropout"),
    }
    targets = f.raw("lora_target_modules")
    if targets is None:
        b.lacks(
            "lora_target_modules",
            "unset: peft adapts its default modules for the architecture (q_proj and v_proj "
            "for Llama and Qwen); sixblanks' model.lora.target_modules names them or "
            "all-linear: the experiment's model.lora keeps all-linear",
        )
    else:
        lora["target_modules"] = targets
    b.experiment["model.lora"] = (lora, b.src(*keys))


def _trl_optimizer(b: _Builder) -> None:
    f = b.f
    b.optimizer["lr"] = (f.num("learning_rate"), b.src("learning_rate"))
    b.optimizer["weight_decay"] = (f.num("weight_decay"), b.src("weight_decay"))
    b.optimizer["betas"] = (
        [f.num("adam_beta1"), f.num("adam_beta2")],
        b.src("adam_beta1", "adam_beta2"),
    )
    clip = f.num("max_grad_norm")
    b.optimizer["grad_clip"] = (clip if clip else None, b.src("max_grad_norm"))
    if b.optimizer["grad_clip"][0] is None:
        b.notes.append(
            "max_grad_norm 0 or unset turns clipping off; an arm's grad_clip: null "
            "keeps the experiment's, so set optimizer.grad_clip: null there"
        )
        del b.optimizer["grad_clip"]
    _trl_warmup(b, _trl_length(b))
    sched = f.text("lr_scheduler_type")
    if sched not in ("constant", "constant_with_warmup"):
        b.lacks(
            "lr_scheduler_type",
            f"'{sched}' decays the learning rate over max_steps; "
            "sixblanks keeps it constant after the warm-up (its runs end on a budget)",
        )
    if f.text("optim") not in ("adamw_torch", "adamw_torch_fused", "adamw_hf"):
        b.lacks("optim", "sixblanks trains with torch's AdamW")
    if f.num("adam_epsilon") != 1e-8:
        b.lacks("adam_epsilon", "sixblanks' AdamW keeps torch's eps 1e-8")


def _trl_length(b: _Builder) -> int | None:
    """TRL's run length as the experiment's budget: max_steps > 0 optimizer updates (it overrides
    num_train_epochs), the ledger's optimizer_steps. Without it the run is num_train_epochs passes
    over a dataset the configuration does not size: no budget, and the note says how to make one.
    Returns the run's optimizer updates, or None."""

    f = b.f
    per = b.updates_per_step()
    total = f.whole("max_steps")
    if total is not None and total > 0:
        b.experiment["budget.optimizer_steps"] = (total, b.src("max_steps"))
        b.budget_note = (
            f"max_steps={total}: TRL's run is {total} optimizer updates, the ledger's "
            f"optimizer_steps (a step here makes {per}: data.epochs x data.minibatches)"
        )
        if total % per:
            b.budget_note += (
                f"; the run ends after {total // per} steps, {total % per} updates short, as the "
                "next step would not fit"
            )
        return total
    prompts = b.rollout.get("prompts_per_step", (None,))[0] or "P"
    epochs = f.num("num_train_epochs")
    b.budget_note = (
        f"{f.show('num_train_epochs')} passes over the training dataset set TRL's run length "
        f"(max_steps={f.raw('max_steps')!r} does not), and the dataset's size is not in the "
        "configuration: no budget is derived from it, the experiment's applies; for a dataset "
        f"of D prompts TRL's run is optimizer_steps = {epochs:g} x (D // {prompts}) x {per}"
    )
    return None


def _trl_warmup(b: _Builder, total: int | None) -> None:
    """TRL's warm-up counts optimizer updates; sixblanks raises the learning rate once per step
    (all of its updates alike): the warm-up in steps is the updates over updates per step, rounded
    up. A fraction (warmup_steps < 1, or the older warmup_ratio, which a warmup_steps >= 1
    overrides) is of the run's updates, ceil(fraction x max_steps), known only with max_steps."""

    f = b.f
    warm = f.num("warmup_steps") or 0.0
    ratio = f.num("warmup_ratio") or 0.0
    updates, src = int(warm), b.src("warmup_steps")
    if warm >= 1 and ratio > 0:
        b.notes.append("warmup_ratio: no effect, warmup_steps >= 1 overrides it")
    elif 0 < warm < 1 or (warm == 0 and ratio > 0):
        key = "warmup_steps" if warm else "warmup_ratio"
        if total is None:
            b.lacks(
                key,
                "a warm-up as a fraction of TRL's run, whose length (num_train_epochs passes "
                "over the dataset) the configuration does not give: set max_steps, or the "
                "arm's optimizer.warmup_steps by hand",
            )
            return
        updates, src = math.ceil(total * (warm or ratio)), b.src(key, "max_steps")
    per = b.updates_per_step()
    steps = math.ceil(updates / per)
    b.optimizer["warmup_steps"] = (steps, src)
    if per > 1 and updates:
        b.notes.append(
            f"warm-up: TRL warms up over {updates} optimizer updates; sixblanks raises the "
            f"learning rate once per step of {per} updates: {steps} steps"
        )


def _trl_half(loss: str, scale: str) -> str:
    """Which half of Dr. GRPO a TRL configuration has, in the words of what it sets."""

    head = f"loss_type={loss!r}, scale_rewards={scale!r}: "
    if loss != "dr_grpo":
        return head + "no std, with a length-dependent denominator"
    kept = {
        "group": "the group std kept (each group's rewards divided by their std)",
        "batch": "the batch std kept (every advantage divided by the std of the batch's raw "
        "rewards, Lite PPO's scale)",
    }[scale]
    return head + "the constant denominator with " + kept


def _trl_traps(b: _Builder, loss: str, cap: float, ratio: str, scale: str) -> list[Trap]:
    f = b.f
    vllm, corr = f.flag("use_vllm"), f.flag("vllm_importance_sampling_correction")
    ga = f.whole("gradient_accumulation_steps") or 1
    mu = f.whole("num_iterations") or 1
    spg = f.whole("steps_per_generation") or ga
    steps = max(1, spg // ga) * mu  # optimizer steps each generation batch feeds
    eps = f.num("epsilon") or 0.2
    cap_key = "epsilon_high" if f.given("epsilon_high") else "epsilon (epsilon_high unset)"

    if loss != "cispo":
        cispo = f"loss_type={loss!r}: not CISPO"
    elif cap <= 1:
        cispo = f"the weight is min(r, {cap:g}) from {cap_key}: every gradient scaled by <= {cap:g}"
    else:
        cispo = f"{cap_key}={cap:g}: min(r, {cap:g}) is the band [0, {cap:g}]"

    if vllm and not corr:
        off = "use_vllm with vllm_importance_sampling_correction=false: nothing weighs " + (
            f"pi_old/pi_vllm, and each generation batch feeds {steps} optimizer steps"
            if steps > 1
            else "pi_vllm (pi_old is the trainer's detached log-probs: ratio 1)"
        )
    elif vllm:
        off = "use_vllm with vllm_importance_sampling_correction on"
    else:
        off = "no vLLM: the trainer samples with its own weights" + (
            f" (each batch feeds {steps} steps; the ratio to pi_old corrects it)"
            if steps > 1
            else ""
        )

    half = (loss == "dr_grpo") != (scale == "none")
    dapo = loss == "dapo" and not f.given("epsilon_high")
    return [
        _trap("cispo_cap", loss == "cispo" and cap <= 1, cispo),
        _trap(
            "batch_std",
            scale == "batch",
            f"scale_rewards={scale!r}"
            + (
                ": the std of the raw rewards (advantage.batch_std: rewards)"
                if scale == "batch"
                else ""
            ),
        ),
        _trap("off_policy_uncorrected", vllm and not corr, off),
        _trap(
            "default_aggregation",
            not f.given("loss_type"),
            "loss_type unset: 'dapo', a token-mean"
            if not f.given("loss_type")
            else f"loss_type={loss!r}",
        ),
        _trap(
            "dr_grpo_half",
            half,
            _trl_half(loss, scale) if half else f"loss_type={loss!r}, scale_rewards={scale!r}",
        ),
        Trap(
            "dapo_name_only",
            "TRL's loss_type 'dapo' (the default) is only DAPO's token-level aggregation: no "
            "clip-higher unless epsilon_high is set, no dynamic sampling, no overlong shaping.",
            dapo,
            f"loss_type={loss!r}" + (", epsilon_high unset: clip 0.2/0.2" if dapo else ""),
        ),
        _trap(
            "gspo_clip_range",
            ratio == "sequence" and min(eps, cap) >= 0.01,
            f"importance_sampling_level={f.raw('importance_sampling_level')!r}, epsilon={eps:g}",
        ),
    ]


# --------------------------------------------------------------------------- verl

_A, _R, _AL = "actor_rollout_ref.actor.", "actor_rollout_ref.rollout.", "algorithm."
_RC = _AL + "rollout_correction."

# verl/trainer/config/_generated_ppo_trainer.yaml@1dda039 (the hydra defaults; the dataclasses in
# verl/workers/config/actor.py:152-180 and verl/trainer/config/algorithm.py:36-59, 178-184, 654-666
# agree except rollout_correction.rollout_is: null in YAML, "sequence" in the dataclass)
VERL_DEFAULTS: dict[str, Any] = {
    _A + "ppo_mini_batch_size": 256,  # actor.py:152
    _A + "clip_ratio": 0.2,  # actor.py:159
    _A + "clip_ratio_low": 0.2,  # actor.py:160 (not null: clip_ratio alone changes nothing)
    _A + "clip_ratio_high": 0.2,  # actor.py:161
    _A + "policy_loss.loss_mode": "vanilla",  # actor.py:94
    _A + "clip_ratio_c": 3.0,  # actor.py:164
    _A + "loss_agg_mode": "token-mean",  # actor.py:165
    _A + "loss_scale_factor": None,  # actor.py:166
    _A + "entropy_coeff": 0.0,  # actor.py:167
    _A + "tau_pos": 1.0,  # actor.py:168
    _A + "tau_neg": 1.05,  # actor.py:169
    _A + "use_kl_loss": False,  # actor.py:172
    _A + "kl_loss_coef": 0.001,  # actor.py:176
    _A + "kl_loss_type": "low_var_kl",  # actor.py:177
    _A + "ppo_epochs": 1,  # actor.py:178
    _A + "grad_clip": 1.0,  # actor.py:310
    _A + "optim.lr": 1e-6,  # _generated_ppo_trainer.yaml:12
    _A + "optim.weight_decay": 0.01,  # :15
    _A + "optim.lr_warmup_steps": -1,  # :16 (-1: lr_warmup_steps_ratio decides)
    _A + "optim.lr_warmup_steps_ratio": 0.0,  # :13
    _A + "optim.betas": [0.9, 0.999],  # :17
    _A + "optim.clip_grad": 1.0,  # :20
    _A + "optim.lr_scheduler_type": "constant",  # :23
    _A + "optim.optimizer": "AdamW",  # :10
    _R + "n": 1,  # :335
    _R + "temperature": 1.0,  # :303
    _R + "top_k": -1,  # :304
    _R + "top_p": 1.0,  # :305
    _R + "do_sample": True,  # :334
    _R + "response_length": None,  # :309 (${data.max_response_length})
    _R + "calculate_log_probs": True,  # :363
    _R + "name": "vllm",  # :299 (??? in YAML: vllm, sglang or trtllm, all separate engines)
    "data.train_batch_size": 1024,  # :511
    "data.gen_batch_size": None,  # :512
    "data.max_response_length": 512,  # :510
    _AL + "gamma": 1.0,  # :862
    _AL + "lam": 1.0,  # :863
    _AL + "adv_estimator": "gae",  # :864
    _AL + "norm_adv_by_std_in_grpo": True,  # :865
    _AL + "filter_groups.enable": False,  # :868
    _AL + "filter_groups.metric": None,  # :869
    _AL + "filter_groups.max_num_gen_batches": 0,  # :870 (non-positive: no limit)
    _AL + "use_kl_in_reward": False,  # :872
    _AL + "kl_penalty": "kl",  # :873
    _AL + "kl_ctrl.type": "fixed",  # :876
    _AL + "kl_ctrl.kl_coef": 0.001,  # :877
    _AL + "use_pf_ppo": False,  # :880
    _RC + "rollout_is": None,  # algorithm/rollout_correction.yaml
    _RC + "rollout_is_threshold": 2.0,
    _RC + "rollout_rs": None,
    _RC + "rollout_rs_threshold": None,
    _RC + "bypass_mode": False,
    _RC + "loss_type": "ppo_clip",
    _RC + "rollout_is_batch_normalize": False,
    "critic.optim.lr": 1e-5,  # :544
    "critic.cliprange_value": 0.5,  # :621
    "trainer.v1.trainer_mode": "sync",  # :983
    "trainer.v1.separate_async.parameter_sync_step": 4,  # :989
    "reward.reward_kwargs.overlong_buffer_cfg.enable": False,  # DAPO reward manager
    "reward.reward_kwargs.overlong_buffer_cfg.len": 4096,  # (experimental/reward_loop/...
    "reward.reward_kwargs.overlong_buffer_cfg.penalty_factor": 1.0,  # ...reward_manager/dapo.py)
    "distillation.enabled": False,  # :886
    "actor_rollout_ref.model.lora_rank": 0,  # :452
    "actor_rollout_ref.model.lora_alpha": 16,  # :453
    "actor_rollout_ref.model.target_modules": "all-linear",  # :454
    "data.max_prompt_length": 512,  # :509
    "trainer.total_epochs": 30,  # :954
    "trainer.total_training_steps": None,  # :955 (null: total_epochs x the dataset's batches)
    "trainer.critic_warmup": 0,  # :973
    _R + "ignore_eos": False,  # :312
    _R + "over_sample_rate": 0.0,  # :336
    _R + "enable_rollout_routing_replay": False,  # :387
}

# The other leaf fields of the sections the reader checks (from _generated_ppo_trainer.yaml):
# known, with no effect on the update.
_VERL_OTHER = {
    _A: "optim.optimizer_impl optim.total_training_steps optim.min_lr_ratio optim.num_cycles "
    "optim.zero_indexed_step optim.warmup_style optim.override_optimizer_config rollout_n strategy "
    "ppo_micro_batch_size ppo_micro_batch_size_per_gpu use_dynamic_bsz ppo_max_token_len_per_gpu "
    "freeze_vision_tower policy_loss.clip_cov_ratio policy_loss.clip_cov_lb policy_loss.clip_cov_ub "
    "policy_loss.kl_cov_ratio policy_loss.ppo_kl_coef policy_loss.dro_beta calculate_entropy "
    "calculate_sum_pi_squared use_prefix_grouper use_torch_compile shuffle data_loader_seed "
    "use_fused_kernels ulysses_sequence_parallel_size entropy_from_logits_with_chunking "
    "entropy_from_logits_chunk_size entropy_checkpointing pad_to_length use_remove_padding "
    "use_rollout_log_probs ppo_infer_micro_batch_size_per_gpu ppo_infer_max_token_len_per_gpu",
    _R: "mode nnodes n_gpus_per_node full_determinism seed prompt_length dtype "
    "gpu_memory_utilization enforce_eager cudagraph_capture_sizes free_cache_engine "
    "tensor_model_parallel_size data_parallel_size expert_parallel_size "
    "pipeline_model_parallel_size max_num_batched_tokens max_model_len max_num_seqs "
    "enable_chunked_prefill enable_prefix_caching logprobs_mode scheduling_policy load_format "
    "layered_summon log_prob_micro_batch_size log_prob_micro_batch_size_per_gpu "
    "log_prob_use_dynamic_bsz log_prob_max_token_len_per_gpu disable_log_stats "
    "multi_stage_wake_up skip_tokenizer_init "
    "moe_load_balance_metrics_interval quantization quantization_config_file",
    _AL: "filter_groups.max_inflight_gen_batches kl_ctrl.horizon kl_ctrl.target_kl "
    "pf_ppo.reweight_method pf_ppo.weight_pow",
    "data.": "tokenizer use_shm train_files val_files train_max_samples val_max_samples prompt_key "
    "reward_fn_key val_batch_size tool_config_path function_tool_path "
    "return_raw_input_ids return_raw_chat return_full_prompt shuffle seed dataloader_num_workers "
    "image_patch_size validation_shuffle filter_overlong_prompts filter_overlong_prompts_workers "
    "truncation image_key video_key audio_key trust_remote_code return_multi_modal_inputs "
    "apply_chat_template_kwargs mm_processor_kwargs custom_cls",
    "critic.": "optim rollout_n strategy enable ppo_mini_batch_size ppo_micro_batch_size "
    "ppo_micro_batch_size_per_gpu use_dynamic_bsz ppo_max_token_len_per_gpu "
    "forward_max_token_len_per_gpu ppo_epochs shuffle data_loader_seed loss_agg_mode "
    "loss_scale_factor forward_micro_batch_size forward_micro_batch_size_per_gpu "
    "ulysses_sequence_parallel_size grad_clip model fsdp profiler checkpoint",
}
VERL_OTHER = frozenset(
    f"{sec}{leaf}" for sec, leaves in _VERL_OTHER.items() for leaf in leaves.split()
)

_SPEED = "speed, memory and parallelism: the same update computed another way"
_SEEDS = "seeds and data order: each run is seeded from the experiment's seeds"


def _keys(prefix: str, names: str = "") -> tuple[str, ...]:
    return tuple(prefix + n for n in names.split()) if names else (prefix,)


_VERL_WHY: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        _keys(_A, "optim.total_training_steps"),
        "set by verl at run time from trainer.total_training_steps",
    ),
    (
        _keys(_A, "optim.min_lr_ratio optim.num_cycles optim.zero_indexed_step optim.warmup_style"),
        "the cosine schedule's options (lr_scheduler_type is named when not constant)",
    ),
    (
        _keys(_A, "optim.optimizer_impl optim.override_optimizer_config"),
        "the optimizer's implementation and extra arguments (optim.optimizer is read)",
    ),
    (_keys(_A, "rollout_n"), "set from rollout.n, read there"),
    (
        _keys(_A + "policy_loss."),
        "read only by the clip_cov, kl_cov and dro losses, named when chosen",
    ),
    (_keys(_A, "calculate_entropy calculate_sum_pi_squared"), "metrics only"),
    (_keys(_A, "shuffle data_loader_seed"), _SEEDS),
    (
        _keys(_A, "freeze_vision_tower"),
        "vision-language models only: sixblanks' policies read text",
    ),
    (
        _keys(_A, "use_rollout_log_probs"),
        "defined, and read by no code at verl@1dda039 (bypass_mode is how verl trains against "
        "the rollout's log-probs)",
    ),
    (_keys(_A), _SPEED),
    (_keys(_R, "seed full_determinism"), _SEEDS),
    (
        _keys(_R, "prompt_length"),
        "the engine's prompt length, data.max_prompt_length by default (read)",
    ),
    (
        _keys(_R),
        "the rollout engine's machines, memory, scheduling and numerics: how the samples are "
        "made (its mismatch with the trainer is what rollout_correction weighs)",
    ),
    (_keys(_AL + "pf_ppo."), "read only with use_pf_ppo, named when set"),
    (_keys(_AL + "kl_ctrl."), "the adaptive KL controller's (kl_ctrl.type adaptive is named)"),
    (_keys(_AL + "filter_groups."), "how many generation batches run at once: the same samples"),
    (_keys("data.", "shuffle seed validation_shuffle"), _SEEDS),
    (_keys("data."), "the dataset, its files and how they are loaded: the experiment's task"),
    (
        _keys("critic."),
        "the critic's own batching, epochs and implementation, not carried over (sixblanks' "
        "critic: advantage.critic; critic.optim.lr and cliprange_value are read)",
    ),
    (
        _keys("actor_rollout_ref.model."),
        "the model and how it is loaded: the experiment's model (LoRA is read)",
    ),
    (
        _keys("actor_rollout_ref.ref."),
        "the reference model's engine: its weights are the initial policy's",
    ),
    (
        ("reward.", "reward_model.", "custom_reward_function.", "sandbox_fusion."),
        "the reward: the experiment's task and its verifier",
    ),
    (
        _keys("trainer."),
        "the trainer's bookkeeping: logging, checkpoints, evaluation schedule, machines",
    ),
)
"""Why a field verl knows has no effect on the update: the first rule with the field, a dict
field's section, or a section (ending in '.') holding it."""


def _verl_why(key: str) -> str:
    for keys, why in _VERL_WHY:
        for k in keys:
            if key == k or key.startswith(k if k.endswith(".") else k + "."):
                return why
    return "infrastructure: machines, profiling, storage"


VERL_SUBTREES = tuple(
    f"{sec}{sub}."
    for sec, subs in (
        (_A, "fsdp_config megatron profiler checkpoint qat router_replay optim policy_loss"),
        (
            _R,
            "engine_kwargs val_kwargs multi_turn agent trace prometheus disaggregation "
            "checkpoint_engine profiler mtp qat",
        ),
        ("critic.", "optim model fsdp profiler checkpoint megatron"),
    )
    for sub in subs.split()
)
"""Sub-sections of the checked sections whose fields are known and have no effect on the update
(the optimizer's and the policy loss's own fields are checked by name above)."""

VERL_SECTIONS = (
    "actor_rollout_ref.actor",
    "actor_rollout_ref.rollout",
    "algorithm",
    "data",
    "critic",
)
"""Sections whose every field the reader knows: another field there is reported as unknown."""

VERL_OTHER_SECTIONS = (
    "actor_rollout_ref.model",
    "actor_rollout_ref.ref",
    "actor_rollout_ref.hybrid_engine",
    "actor_rollout_ref.nccl_timeout",
    "trainer",
    "reward",
    "reward_model",
    "custom_reward_function",
    "sandbox_fusion",
    "distillation",
    "transfer_queue",
    "global_profiler",
    "ray_kwargs",
    "hydra",
)
"""Top-level sections with no effect on the update (their fields are not checked one by one)."""

VERL_LOSS_MODES = (
    "vanilla",
    "dppo_tv",
    "dppo_kl",
    "gspo",
    "sapo",
    "gpg",
    "clip_cov",
    "kl_cov",
    "geo_mean",
    "dro",
    "cispo",
    "bypass_mode",
)  # workers/config/actor.py:83-84
VERL_ESTIMATORS = (
    "gae",
    "grpo",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "remax",
    "rloo",
    "opo",
    "grpo_passk",
    "gpg",
    "rloo_vectorized",
    "grpo_vectorized",
    "optimal_token_baseline",
    "tir_optimal_token_baseline",
    "gdpo",
)  # core_algos.py:97-110
VERL_AGG = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)  # actor.py:214-220

_VERL_FAMILY = {
    "gspo": ("gspo_token_paper",),
    "sapo": ("sapo",),
    "cispo": ("cispo",),
    "dppo_tv": ("dppo",),
    "dppo_kl": ("dppo",),
    "gpg": ("reinforce",),
}
"""The preset family each verl loss names (the preference on a tie); the estimator's otherwise."""

_KL = {"kl": "k1", "k1": "k1", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3"}
"""verl's kl_penalty names (core_algos.py:2215-2244) as sixblanks estimators."""


def _verl_known(key: str) -> bool:
    if key in VERL_DEFAULTS or key in VERL_OTHER:
        return True
    if any(key.startswith(s) for s in VERL_SUBTREES):
        return True
    if any(key.startswith(k + ".") for k in (*VERL_DEFAULTS, *VERL_OTHER)):  # inside a dict field
        return True
    if any(key == s or key.startswith(s + ".") for s in VERL_OTHER_SECTIONS):
        return True
    return False


def _verl(b: _Builder) -> list[Trap]:
    f = b.f
    est = f.text(_AL + "adv_estimator", VERL_ESTIMATORS) or "gae"
    mode = f.text(_A + "policy_loss.loss_mode", VERL_LOSS_MODES) or "vanilla"
    agg = f.text(_A + "loss_agg_mode", VERL_AGG) or "token-mean"
    bypass = f.flag(_RC + "bypass_mode") or mode == "bypass_mode"
    bypass_loss = f.text(_RC + "loss_type", ("ppo_clip", "reinforce")) or "ppo_clip"
    c_key = _A + "clip_ratio_c"
    low, high, c = f.num(_A + "clip_ratio_low"), f.num(_A + "clip_ratio_high"), f.num(c_key)
    low = f.num(_A + "clip_ratio") if low is None else low  # core_algos.py:1314-1315
    high = f.num(_A + "clip_ratio") if high is None else high
    G = f.whole(_R + "n") or 1
    if c is not None and c <= 1:
        f.problems.append(f"{f.source}: {c_key}: verl asserts clip_ratio_c > 1 (got {c:g})")

    loss, lm = _verl_weight(b, mode, bypass, bypass_loss, (low, high, c))
    norm = _verl_advantage(b, est)
    _verl_norm(b, agg, loss, lm)
    _verl_regularizer(b)
    b.set("mask.overlong_filter", False, *lm)

    # (i)
    _verl_data(b, G)
    _verl_rollout(b)
    _verl_optimizer(b)
    for key, reason in (
        (_AL + "use_pf_ppo", "PF-PPO's reweighted resampling of the batch"),
        ("distillation.enabled", "on-policy distillation from a teacher"),
    ):
        if f.flag(key):
            b.lacks(key, f"{reason} has no sixblanks equivalent")
    return _verl_traps(b, est, mode, agg, loss, bypass, low, high, norm)


def _verl_weight(
    b: _Builder,
    mode: str,
    bypass: bool,
    bypass_loss: str,
    bounds: tuple[float | None, float | None, float | None],
) -> tuple[str, tuple[str, ...]]:
    """w: the ratio, its trust region and the rollout correction. Returns the loss verl computes
    (bypass_* when bypass_mode replaces loss_mode) and the fields that name it."""

    f = b.f
    low, high, c = bounds
    low_key, high_key, c_key = _A + "clip_ratio_low", _A + "clip_ratio_high", _A + "clip_ratio_c"
    # (core_algos.py: vanilla 1285-1376, dppo 1379-1542, gspo 1545-1618, sapo 1621-1703,
    # gpg 1706-1739, cispo 2046-2104, bypass 2412-2548)
    loss = "bypass_" + bypass_loss if bypass else mode
    if loss in ("clip_cov", "kl_cov", "geo_mean", "dro"):
        b.lacks(
            _A + "policy_loss.loss_mode",
            f"'{mode}' has no sixblanks trust region; the arm uses PPO's clip (vanilla)",
        )
        loss = "vanilla"
    b.prefer = list(_VERL_FAMILY.get(loss, ()))
    lm = b.src(_A + "policy_loss.loss_mode")
    if bypass:
        lm = b.src(_RC + "bypass_mode", _RC + "loss_type")
    lo_src = b.src(low_key) if f.raw(low_key) is not None else b.src(_A + "clip_ratio")
    hi_src = b.src(high_key) if f.raw(high_key) is not None else b.src(_A + "clip_ratio")
    clamp = 20.0
    if loss in ("vanilla", "bypass_ppo_clip"):
        b.set("weight.ratio", "token", *lm)
        b.set("weight.trust_region", "clip", *lm)
        b.set("weight.eps_low", low, *lo_src)
        b.set("weight.eps_high", high, *hi_src)
        b.set("weight.dual_clip_c", c, *b.src(c_key))  # always on (core_algos.py:1344-1349)
    elif loss == "gspo":
        b.set("weight.ratio", "gspo_token", *lm)
        b.set("weight.trust_region", "clip", *lm)
        b.set("weight.eps_low", low, *lo_src)
        b.set("weight.eps_high", high, *hi_src)
        b.set("weight.dual_clip_c", None, *lm)
        clamp = 10.0  # core_algos.py:1590 (upper side only)
    elif loss == "sapo":
        b.set("weight.ratio", "token", *lm)
        b.set("weight.trust_region", "sapo", *lm)
        b.set("weight.tau_pos", f.num(_A + "tau_pos"), *b.src(_A + "tau_pos"))
        b.set("weight.tau_neg", f.num(_A + "tau_neg"), *b.src(_A + "tau_neg"))
    elif loss == "cispo":
        b.set("weight.ratio", "token", *lm)
        b.set("weight.trust_region", "cispo", *lm)
        if low is not None and low > 1:
            b.notes.append(
                f"{low_key}={low:g}: a lower bound below 0 clips nothing (ratios are "
                "> 0), as eps_low 1"
            )
        b.set("weight.eps_low", min(low if low is not None else 0.2, 1.0), *lo_src)
        b.set("weight.eps_high", high, *hi_src)
    elif loss in ("dppo_tv", "dppo_kl"):
        b.set("weight.ratio", "token", *lm)  # anchored on pi_old (core_algos.py:1431-1436)
        b.set("weight.trust_region", loss, *lm)
        b.set("weight.eps_low", low, *lo_src)
        b.set("weight.eps_high", high, *hi_src)
        b.set("weight.ratio_cap", c, *b.src(c_key))  # config.get(.., 20.0) never falls back
    elif loss in ("gpg", "bypass_reinforce"):
        b.set("weight.ratio", "none", *lm)
        b.set("weight.trust_region", "none", *lm)
    if loss not in ("dppo_tv", "dppo_kl"):
        b.set("weight.ratio_cap", None, *lm)
    if loss not in ("vanilla", "bypass_ppo_clip", "gpg", "bypass_reinforce"):
        b.set("weight.dual_clip_c", None, *lm)
    if loss not in ("gpg", "bypass_reinforce"):
        b.set("weight.log_ratio_clamp", clamp, *lm)
    b.set("weight.old_policy", "rollout" if bypass else "recomputed", *b.src(_RC + "bypass_mode"))
    b.set("weight.target_kl", None, *lm)
    _verl_correction(b, bypass, bypass_loss)
    return loss, lm


def _verl_advantage(b: _Builder, est: str) -> bool:
    """A: the estimator. Returns norm_adv_by_std_in_grpo as read."""

    f = b.f
    # (core_algos.py: grpo 267-331, rloo 587-636, rpp 693-731, rpp baseline 533-584, remax 734)
    a = b.src(_AL + "adv_estimator")
    norm = f.flag(_AL + "norm_adv_by_std_in_grpo")
    if est in ("grpo", "grpo_vectorized"):
        b.set(
            "advantage.estimator",
            "group_norm" if norm else "group_mean",
            *a,
            *b.src(_AL + "norm_adv_by_std_in_grpo"),
        )
        if norm:
            b.set("advantage.std_ddof", 1, *a)  # torch.std (:321)
            b.set("advantage.std_eps", 1e-6, *a)  # epsilon=1e-6 (:272)
        b.set("advantage.singleton", "raw", *a)  # a group of one: mean 0, std 1 (:315-317)
        b.prefer = b.prefer or (["grpo"] if norm else ["dr_grpo", "grpo"])
    elif est in ("rloo", "rloo_vectorized"):
        b.set("advantage.estimator", "loo", *a)
        b.set("advantage.singleton", "raw" if est == "rloo" else "zero", *a)
        b.prefer = b.prefer or ["rloo"]
    elif est == "reinforce_plus_plus":
        b.set("advantage.estimator", "reinforce_pp", *a)
        b.set("advantage.gamma", f.num(_AL + "gamma"), *b.src(_AL + "gamma"))
        b.notes.append(
            "reinforce_plus_plus whitens with verl's masked_whiten (unbiased "
            "variance); sixblanks' reinforce_pp uses ddof 0 (OpenRLHF)"
        )
        b.prefer = b.prefer or ["reinforce_pp"]
    elif est == "reinforce_plus_plus_baseline":
        b.set("advantage.estimator", "reinforce_pp_baseline", *a)
        b.set("advantage.singleton", "raw", *a)
        b.prefer = b.prefer or ["reinforce_pp_baseline"]
    elif est == "remax":
        b.set("advantage.estimator", "remax", *a)
        b.prefer = b.prefer or ["remax"]
    elif est == "gae":
        b.set("advantage.estimator", "gae", *a)
        b.set("advantage.gamma", f.num(_AL + "gamma"), *b.src(_AL + "gamma"))
        b.set("advantage.lam", f.num(_AL + "lam"), *b.src(_AL + "lam"))
        b.set(
            "advantage.critic.value_clip",
            f.num("critic.cliprange_value"),
            *b.src("critic.cliprange_value"),
        )
        b.set("advantage.critic.lr", f.num("critic.optim.lr"), *b.src("critic.optim.lr"))
        b.set("advantage.critic.bootstrap_truncated", False, *a)  # next value 0 at the end
        b.set("advantage.critic.whiten", "batch", *a)  # masked_whiten over the batch
        b.prefer = b.prefer or ["ppo"]
    else:
        b.lacks(
            _AL + "adv_estimator",
            f"'{est}' has no sixblanks estimator; the arm uses GRPO's group mean/std",
        )
        b.set("advantage.estimator", "group_norm", *a)
        b.set("advantage.std_ddof", 1, *a)
        b.set("advantage.std_eps", 1e-6, *a)
    return norm


def _verl_norm(b: _Builder, agg: str, loss: str, lm: tuple[str, ...]) -> None:
    """Z: loss_agg_mode (and loss_scale_factor) as the normalization blank."""

    f = b.f
    # (core_algos.py:1140-1207; gspo and sapo aggregate seq-mean-token-mean whatever the mode)
    z = b.src(_A + "loss_agg_mode", _A + "loss_scale_factor")
    forced = loss in ("gspo", "sapo")
    zmode = {"seq-mean-token-sum-norm": "constant"}.get(agg, agg)
    if forced:
        zmode = "seq-mean-token-mean"
        z = (*z, *lm)
    b.set("normalization.mode", zmode, *z)
    if zmode not in ("token-mean", "token-sum"):
        # the global batch size is ppo_mini_batch_size x n sequences, empty ones included
        # (trainer/ppo/v1/trainer_base.py:1704)
        b.set("normalization.count_empty_rows", True, *z)
    if zmode == "constant":
        factor = f.whole(_A + "loss_scale_factor")
        resp = f.whole(_R + "response_length") or f.whole("data.max_response_length")
        b.set("normalization.l_max", None if factor in (None, resp) else factor, *z)
        if factor is None:
            b.lacks(
                _A + "loss_scale_factor",
                "null: verl divides by the padded length of each "
                "micro-batch (core_algos.py:1188-1193), which changes with the batch; the arm "
                "divides by the generation budget max_new_tokens",
                None,
            )


def _verl_regularizer(b: _Builder) -> None:
    """R: the KL in the loss or in the reward, the entropy bonus."""

    f = b.f
    # (actor: kl loss, core_algos.py:2187-2212; algorithm: kl in the reward)
    if f.flag(_A + "use_kl_loss"):
        coef = f.num(_A + "kl_loss_coef") or 0.0
        b.set("regularizer.loss_kl_coef", coef, *b.src(_A + "use_kl_loss", _A + "kl_loss_coef"))
        if coef > 0:
            b.set(
                "regularizer.loss_kl_estimator",
                _verl_kl(b, _A + "kl_loss_type", loss=True),
                *b.src(_A + "kl_loss_type"),
            )
    else:
        b.set("regularizer.loss_kl_coef", 0.0, *b.src(_A + "use_kl_loss"))
        if f.given(_A + "kl_loss_type") or f.given(_A + "kl_loss_coef"):
            b.notes.append("kl_loss_type / kl_loss_coef: no effect while use_kl_loss is false")
    if f.flag(_AL + "use_kl_in_reward"):
        coef = f.num(_AL + "kl_ctrl.kl_coef") or 0.0
        b.set(
            "regularizer.reward_kl_coef",
            coef,
            *b.src(_AL + "use_kl_in_reward", _AL + "kl_ctrl.kl_coef"),
        )
        if coef > 0:
            b.set(
                "regularizer.reward_kl_estimator",
                _verl_kl(b, _AL + "kl_penalty", loss=False),
                *b.src(_AL + "kl_penalty"),
            )
        if f.text(_AL + "kl_ctrl.type") == "adaptive":
            b.lacks(_AL + "kl_ctrl.type", "an adaptive KL coefficient: sixblanks' is fixed")
    else:
        b.set("regularizer.reward_kl_coef", 0.0, *b.src(_AL + "use_kl_in_reward"))
    b.set(
        "regularizer.entropy_coef", f.num(_A + "entropy_coeff") or 0.0, *b.src(_A + "entropy_coeff")
    )


def _verl_kl(b: _Builder, key: str, loss: bool) -> str:
    """verl's KL name as a sixblanks estimator: 'k3+'/'low_var_kl+' straight-through k3."""

    name = b.f.text(key) or "kl"
    base, plus = (name[:-1], True) if name.endswith("+") else (name, False)
    if base not in _KL:
        b.lacks(key, f"'{name}' has no sixblanks KL estimator; the arm uses k3")
        return "k3"
    est = _KL[base]
    if plus and loss and est == "k3":
        return "k3+"
    if plus and loss and est == "k1":
        b.notes.append(
            f"{key}={name!r}: k1's value with k2's gradient; the arm uses k2 (the same "
            "gradient, a different logged value)"
        )
        return "k2"
    if plus and not loss:
        b.notes.append(
            f"{key}={name!r}: the '+' (straight-through gradient) has no effect on a "
            "KL placed in the reward"
        )
    return est


def _verl_threshold(b: _Builder, key: str, value: Any) -> tuple[float | None, float | None]:
    """A threshold as (lower, upper): "lo_hi" or a number (upper only)."""

    if isinstance(value, str) and "_" in value:
        lo, _, hi = value.partition("_")
        try:
            return float(lo), float(hi)
        except ValueError:
            pass
    else:
        try:
            return None, float(value)
        except (TypeError, ValueError):
            pass
    b.f.problems.append(f"{b.f.source}: {key}: {value!r} is not a number or a 'lower_upper' pair")
    return None, None


def _verl_correction(b: _Builder, bypass: bool, bypass_loss: str) -> None:
    """algorithm.rollout_correction (trainer/ppo/rollout_corr_helper.py)."""

    f = b.f
    isl = f.text(_RC + "rollout_is", ("token", "sequence"))
    rs = f.text(_RC + "rollout_rs")
    src = b.src(_RC + "rollout_is", _RC + "rollout_is_threshold", _RC + "bypass_mode")
    rs_src = b.src(_RC + "rollout_rs", _RC + "rollout_rs_threshold")
    tis: tuple[float, str] | None = None
    gate: dict[str, Any] | None = None
    gate_src = src
    if f.flag(_RC + "rollout_is_batch_normalize") and isl:
        b.lacks(
            _RC + "rollout_is_batch_normalize",
            "importance weights rescaled to mean 1 over "
            "the batch: sixblanks' weights are not renormalized",
        )
    if isl and bypass and bypass_loss == "ppo_clip":
        b.notes.append(
            "rollout_is in bypass ppo_clip mode only logs its weights: the PPO ratio "
            "pi/pi_rollout already corrects (core_algos.py:2530-2540)"
        )
        isl = None
    if isl:
        lo, hi = _verl_threshold(
            b, _RC + "rollout_is_threshold", f.raw(_RC + "rollout_is_threshold")
        )
        level = "token" if isl == "token" else "sequence_sum"
        if hi is not None and lo is None:  # TIS: clamp(max=C) (rollout_corr_helper.py:595-596)
            tis = (hi, "token" if isl == "token" else "sequence")
        elif hi is not None:  # IcePop: k kept in [lo, hi], 0 outside (:597-605)
            gate = {"level": level, "metric": "ratio", "mode": "weight", "low": lo, "high": hi}
    if rs:
        options = [o.strip() for o in rs.split(",") if o.strip()]
        spec = _verl_rs(b, options[0], f.raw(_RC + "rollout_rs_threshold"))
        for extra in options[1:]:
            b.lacks(
                _RC + "rollout_rs",
                f"a second rejection criterion ('{extra}'): sixblanks "
                "has one gate; the arm keeps the first",
                rs,
            )
        if spec is not None and gate is not None:
            b.lacks(
                _RC + "rollout_rs",
                "rejection sampling on top of IcePop weights: sixblanks "
                "has one gate (the arm keeps the IcePop weights)",
                rs,
            )
        elif spec is not None:
            gate, gate_src = spec, rs_src
            if not bypass:
                b.notes.append(
                    "rollout_rs in decoupled mode overwrites response_mask: rejected "
                    "tokens leave the numerator and the denominator, as a gate in "
                    "mask mode"
                )
    if tis is not None:
        b.set("weight.tis_cap", tis[0], *src)
        b.set("weight.tis_form", tis[1], *src)
    else:
        b.set("weight.tis_cap", None, *src)
    b.set("weight.gate", gate, *gate_src)


def _verl_rs(b: _Builder, option: str, threshold: Any) -> dict[str, Any] | None:
    """One rollout_rs option as a gate in mask mode. The k1 modes bound -log k, so their
    'lo_hi' bounds apply to 1/k (rollout_corr_helper.py:263): the gate's band is [1/hi, 1/lo]."""

    key = _RC + "rollout_rs_threshold"
    if threshold is None:
        b.lacks(_RC + "rollout_rs", f"'{option}' without rollout_rs_threshold", option)
        return None
    lo, hi = _verl_threshold(b, key, threshold)
    if hi is None:
        return None
    levels = {"token": "token", "seq_sum": "sequence_sum", "seq_mean": "sequence"}
    where, _, kind = option.rpartition("_")
    if kind == "k1" and where in levels:
        lo = 1.0 / hi if lo is None else lo  # a single number: the lower bound is its reciprocal
        return {
            "level": levels[where],
            "metric": "ratio",
            "mode": "mask",
            "low": 1.0 / hi,
            "high": 1.0 / lo,
        }
    if kind == "k3" and where in ("token", "seq_mean"):
        return {"level": levels[where], "metric": "kl", "mode": "mask", "low": 0.5, "high": hi}
    b.lacks(
        _RC + "rollout_rs",
        f"'{option}' has no sixblanks gate (token_k1, seq_sum_k1, "
        "seq_mean_k1, token_k3 and seq_mean_k3 do)",
        option,
    )
    return None


def _verl_data(b: _Builder, G: int) -> None:
    f = b.f
    b.set("data.group_size", G, *b.src(_R + "n"))
    b.set("data.epochs", f.whole(_A + "ppo_epochs") or 1, *b.src(_A + "ppo_epochs"))
    tbs, mbs = f.whole("data.train_batch_size"), f.whole(_A + "ppo_mini_batch_size")
    bsrc = b.src("data.train_batch_size", _A + "ppo_mini_batch_size")
    if tbs and mbs:
        k, r = divmod(tbs, mbs)
        if r or not k:
            b.lacks(
                _A + "ppo_mini_batch_size",
                f"{tbs} prompts per step are not a whole number "
                f"of mini-batches of {mbs}: the arm uses {max(1, k)}",
            )
        b.set("data.minibatches", max(1, k), *bsrc)
        b.rollout["prompts_per_step"] = (tbs, b.src("data.train_batch_size"))
    ds = f.flag(_AL + "filter_groups.enable")
    dsrc = b.src(_AL + "filter_groups.enable")
    b.set("data.dynamic_sampling", ds, *dsrc)
    if ds:
        rounds = f.whole(_AL + "filter_groups.max_num_gen_batches") or 0
        rsrc = b.src(_AL + "filter_groups.max_num_gen_batches")
        if rounds > 0:
            b.set("data.max_sampling_rounds", rounds, *rsrc)
        else:
            b.lacks(
                _AL + "filter_groups.max_num_gen_batches",
                "no limit on generation rounds: "
                "sixblanks caps them (data.max_sampling_rounds, the preset's)",
            )
        b.set("data.on_round_cap", "error", *rsrc)  # verl raises at the cap
        metric = f.text(_AL + "filter_groups.metric")
        if metric not in (None, "seq_reward", "seq_final_reward", "score"):
            b.notes.append(
                f"filter_groups.metric={metric!r}: verl keeps groups whose {metric} "
                "varies; sixblanks' dynamic sampling looks at the reward"
            )
        gen = f.whole("data.gen_batch_size")
        if gen is not None and gen != tbs:
            b.lacks(
                "data.gen_batch_size",
                "rounds of another size than the step's prompts: "
                "sixblanks samples prompts_per_step prompts per round",
            )
    ol = "reward.reward_kwargs.overlong_buffer_cfg."
    on = f.flag(ol + "enable")
    b.set("data.overlong_shaping.enabled", on, *b.src(ol + "enable"))
    if on:
        b.set("data.overlong_shaping.cache", f.whole(ol + "len"), *b.src(ol + "len"))
        b.set(
            "data.overlong_shaping.factor",
            f.num(ol + "penalty_factor"),
            *b.src(ol + "penalty_factor"),
        )
    for path, off in _DATA_OFF:
        b.set(path, off, *b.src(_AL + "filter_groups.enable"))
    mode = f.text("trainer.v1.trainer_mode")
    if mode not in (None, "sync"):
        b.lacks(
            "trainer.v1.trainer_mode",
            f"'{mode}' trains while rollouts run ahead on older "
            "weights; sixblanks' asynchronous collection is data.concurrent with "
            "data.broadcast_every / data.staleness, not set here",
        )


def _verl_rollout(b: _Builder) -> None:
    f = b.f
    if not f.flag(_R + "do_sample"):
        b.lacks(_R + "do_sample", "greedy rollouts: sixblanks samples with a temperature > 0")
    t = f.num(_R + "temperature")
    if t is not None and t > 0:
        b.rollout["temperature"] = (t, b.src(_R + "temperature"))
    else:
        b.lacks(_R + "temperature", "sixblanks samples with a temperature > 0")
    b.rollout["top_p"] = (f.num(_R + "top_p"), b.src(_R + "top_p"))
    k = f.whole(_R + "top_k")
    b.rollout["top_k"] = (max(k or 0, 0), b.src(_R + "top_k"))  # -1: off, sixblanks 0
    resp_key = (
        _R + "response_length"
        if f.raw(_R + "response_length") is not None
        else ("data.max_response_length")
    )
    b.rollout["max_new_tokens"] = (f.whole(resp_key), b.src(resp_key))
    if not f.flag(_R + "calculate_log_probs"):
        b.notes.append(
            "rollout.calculate_log_probs=false: verl cannot correct for the rollout "
            "engine (no rollout log-probs); sixblanks always records them"
        )
    b.rollout = {k: v for k, v in b.rollout.items() if v[0] is not None}
    _verl_experiment(b)


def _verl_experiment(b: _Builder) -> None:
    """The experiment's settings a verl configuration holds: the prompt limit (the dataset's
    filter and truncation length, the rollout's prompt_length by default) and LoRA."""

    f = b.f
    n = f.whole("data.max_prompt_length")
    if n is not None:
        b.experiment["rollout.max_prompt_tokens"] = (n, b.src("data.max_prompt_length"))
    m = "actor_rollout_ref.model."
    rank = f.whole(m + "lora_rank") or 0
    if rank > 0:
        lora = {"r": rank, "alpha": f.num(m + "lora_alpha")}
        if f.raw(m + "target_modules") is not None:
            lora["target_modules"] = f.raw(m + "target_modules")
        else:
            b.lacks(
                m + "target_modules",
                "null: peft adapts its default modules for the architecture; the experiment's "
                "model.lora keeps sixblanks' all-linear",
            )
        b.experiment["model.lora"] = (
            lora,
            b.src(m + "lora_rank", m + "lora_alpha", m + "target_modules"),
        )
    if f.flag(_R + "ignore_eos"):
        b.experiment["rollout.ignore_eos"] = (True, b.src(_R + "ignore_eos"))
    rate = f.num(_R + "over_sample_rate") or 0.0
    if rate > 0:
        b.lacks(
            _R + "over_sample_rate",
            f"each round's last {rate:g} of requests (the slowest, longest) aborted: "
            "sixblanks waits for every sample",
        )
    if f.flag(_R + "enable_rollout_routing_replay"):
        b.lacks(
            _R + "enable_rollout_routing_replay",
            "mixture-of-experts routing replayed from the rollout in the training forwards: "
            "sixblanks' forwards route for themselves",
        )
    warm = f.whole("trainer.critic_warmup") or 0
    if warm > 0:
        b.lacks(
            "trainer.critic_warmup",
            f"the first {warm} steps train the critic only (the policy waits); sixblanks "
            "updates the policy from the first step",
        )


def _verl_length(b: _Builder) -> int | None:
    """verl's run length as the experiment's budget: trainer.total_training_steps (it overrides
    total_epochs x the dataset's batches) trainer steps, each ppo_epochs x mini-batches optimizer
    updates: the ledger's optimizer_steps. Without it, total_epochs passes over a dataset the
    configuration does not size: no budget. Returns the run's trainer steps, or None."""

    f = b.f
    per = b.updates_per_step()
    steps = f.whole("trainer.total_training_steps")
    epochs = f.show("trainer.total_epochs")
    if steps is not None and steps > 0:
        b.experiment["budget.optimizer_steps"] = (
            steps * per,
            b.src(
                "trainer.total_training_steps",
                _A + "ppo_epochs",
                "data.train_batch_size",
                _A + "ppo_mini_batch_size",
            ),
        )
        b.budget_note = (
            f"trainer.total_training_steps={steps}: verl's run is {steps} steps of {per} "
            f"optimizer updates (ppo_epochs x mini-batches), optimizer_steps {steps * per}; "
            f"verl also stops after {epochs} passes over the dataset, if they come first "
            "(the dataset's size is not in the configuration)"
        )
        return steps
    tbs = f.whole("data.train_batch_size") or "P"
    b.budget_note = (
        f"{epochs} passes over the training dataset set verl's run length "
        "(trainer.total_training_steps is null), and the dataset's size is not in the "
        "configuration: no budget is derived from it, the experiment's applies; for a dataset "
        f"of D prompts verl's run is optimizer_steps = {f.raw('trainer.total_epochs')} x "
        f"(D // {tbs}) x {per}"
    )
    return None


def _verl_optimizer(b: _Builder) -> None:
    f = b.f
    o = _A + "optim."
    b.optimizer["lr"] = (f.num(o + "lr"), b.src(o + "lr"))
    b.optimizer["weight_decay"] = (f.num(o + "weight_decay"), b.src(o + "weight_decay"))
    betas = f.raw(o + "betas")
    if isinstance(betas, list | tuple) and len(betas) == 2:
        b.optimizer["betas"] = ([float(x) for x in betas], b.src(o + "betas"))
    else:
        f.problems.append(f"{f.source}: {o}betas: {betas!r} is not a pair of numbers")
    clip_key = (
        _A + "grad_clip"
        if f.given(_A + "grad_clip") or not f.given(o + "clip_grad")
        else (o + "clip_grad")
    )
    clip = f.num(clip_key)
    if clip:
        b.optimizer["grad_clip"] = (clip, b.src(clip_key))
    _verl_warmup(b, _verl_length(b))
    sched = f.text(o + "lr_scheduler_type")
    if sched not in (None, "constant"):
        b.lacks(
            o + "lr_scheduler_type",
            f"'{sched}' decays the learning rate; sixblanks keeps it constant after the warm-up",
        )
    if (f.text(o + "optimizer") or "AdamW") != "AdamW":
        b.lacks(o + "optimizer", "sixblanks trains with torch's AdamW")


def _verl_warmup(b: _Builder, total: int | None) -> None:
    """verl's scheduler steps once per trainer step, as sixblanks' warm-up does: lr_warmup_steps
    > 0 is the warm-up in steps; otherwise int(lr_warmup_steps_ratio x the run's steps), known
    where trainer.total_training_steps gives them (in the synchronous trainer, whose scheduler
    steps once per step; the asynchronous modes are not represented)."""

    f = b.f
    o = _A + "optim."
    warm, ratio = f.whole(o + "lr_warmup_steps"), f.num(o + "lr_warmup_steps_ratio") or 0.0
    if warm is not None and warm > 0:
        b.optimizer["warmup_steps"] = (warm, b.src(o + "lr_warmup_steps"))
    elif ratio <= 0:
        b.optimizer["warmup_steps"] = (0, b.src(o + "lr_warmup_steps", o + "lr_warmup_steps_ratio"))
    elif total is None or f.text("trainer.v1.trainer_mode") not in (None, "sync"):
        b.lacks(
            o + "lr_warmup_steps_ratio",
            "a warm-up as a fraction of verl's run, whose length (total_epochs passes over the "
            "dataset) the configuration does not give: set trainer.total_training_steps, or "
            "the arm's optimizer.warmup_steps by hand",
        )
    else:  # workers/engine/fsdp/transformer_impl.py:495-497
        keys = (o + "lr_warmup_steps_ratio", "trainer.total_training_steps")
        b.optimizer["warmup_steps"] = (int(ratio * total), b.src(*keys))


def _verl_traps(
    b: _Builder,
    est: str,
    mode: str,
    agg: str,
    loss: str,
    bypass: bool,
    low: float | None,
    high: float | None,
    norm: bool,
) -> list[Trap]:
    f = b.f
    corrected = bool(f.raw(_RC + "rollout_is") or f.raw(_RC + "rollout_rs")) or bypass
    asyncm = f.text("trainer.v1.trainer_mode") not in (None, "sync")
    set_clip = f.given(_A + "clip_ratio_low") or f.given(_A + "clip_ratio_high")
    cispo_default = loss == "cispo" and not set_clip
    drgrpo_agg = agg == "seq-mean-token-sum-norm"
    traps = [
        _trap(
            "cispo_cap",
            cispo_default,
            (
                f"loss_mode 'cispo' with clip_ratio_low/high at their defaults: band "
                f"[{1 - (low or 0.2):g}, {1 + (high or 0.2):g}]"
            )
            if cispo_default
            else (
                f"loss_mode 'cispo', band [{max(0.0, 1 - (low or 0.2)):g}, {1 + (high or 0.2):g}]"
                if loss == "cispo"
                else f"loss_mode '{mode}': not CISPO"
            ),
        ),
        _trap(
            "off_policy_uncorrected",
            not corrected or (asyncm and not corrected),
            (
                "rollouts come from the rollout engine "
                f"({f.raw(_R + 'name')}) and algorithm.rollout_correction has neither rollout_is nor "
                "rollout_rs (nor bypass_mode): the ratio is pi/pi_old(recomputed) and nothing weighs "
                "pi_old/pi_rollout"
                + ("; the asynchronous trainer mode adds staleness" if asyncm else "")
            )
            if not corrected
            else (
                "bypass_mode: pi_old is the rollout's log-probs"
                if bypass
                else "rollout_correction weighs pi_old/pi_rollout"
            ),
        ),
        _trap(
            "default_aggregation",
            not f.given(_A + "loss_agg_mode") and loss not in ("gspo", "sapo"),
            "loss_agg_mode "
            + (f"set to {agg!r}" if f.given(_A + "loss_agg_mode") else "unset: token-mean")
            + (
                " (gspo and sapo aggregate seq-mean-token-mean anyway)"
                if loss in ("gspo", "sapo")
                else ""
            ),
        ),
        Trap(
            "norm_length_unstable",
            "verl's seq-mean-token-sum-norm with loss_scale_factor null divides by the padded "
            "length of each micro-batch, which changes with the batch (and with dynamic "
            "batching): the gradient's scale drifts; set loss_scale_factor to a constant.",
            drgrpo_agg and f.raw(_A + "loss_scale_factor") is None,
            f"loss_agg_mode={agg!r}, loss_scale_factor={f.raw(_A + 'loss_scale_factor')!r}",
        ),
        Trap(
            "token_sum_scale",
            "verl's token-sum does not divide by anything: the gradient grows with the number of "
            "tokens in a mini-batch, so a learning rate tuned under token-mean is too large.",
            agg == "token-sum" and loss not in ("gspo", "sapo"),
            f"loss_agg_mode={agg!r}",
        ),
        Trap(
            "loss_agg_ignored",
            "verl's gspo and sapo losses aggregate seq-mean-token-mean whatever loss_agg_mode says "
            "(core_algos.py:1605, 1688).",
            loss in ("gspo", "sapo")
            and f.given(_A + "loss_agg_mode")
            and agg != "seq-mean-token-mean",
            f"loss_mode={mode!r}, loss_agg_mode={agg!r}",
        ),
        Trap(
            "dppo_truncation",
            "verl's DPPO truncates the detached ratio at clip_ratio_c, 3.0 by default: the "
            "config.get('clip_ratio_c', 20.0) fallback is never reached, and the authors use 10.",
            loss in ("dppo_tv", "dppo_kl") and not f.given(_A + "clip_ratio_c"),
            f"loss_mode={mode!r}, clip_ratio_c={f.raw(_A + 'clip_ratio_c')!r}"
            + ("" if f.given(_A + "clip_ratio_c") else " (default)"),
        ),
        _trap(
            "dr_grpo_half",
            est in ("grpo", "grpo_vectorized") and (not norm) != drgrpo_agg,
            f"adv_estimator={est!r}, norm_adv_by_std_in_grpo={norm}, loss_agg_mode={agg!r}",
        ),
        Trap(
            "clip_ratio_ignored",
            "verl's clip_ratio_low and clip_ratio_high default to 0.2, not to clip_ratio: "
            "setting clip_ratio alone changes nothing.",
            f.given(_A + "clip_ratio")
            and not set_clip
            and (f.num(_A + "clip_ratio") or 0.2) != 0.2,
            f"clip_ratio={f.raw(_A + 'clip_ratio')!r}, clip_ratio_low={low!r}, "
            f"clip_ratio_high={high!r}",
        ),
        Trap(
            "bypass_replaces_loss",
            "verl's bypass_mode replaces policy_loss.loss_mode with its own loss (PPO-clip or "
            "REINFORCE against the rollout's log-probs, rollout_corr_helper.py:1144).",
            bypass and mode not in ("vanilla", "bypass_mode"),
            f"bypass_mode={bypass}, loss_mode={mode!r}",
        ),
        Trap(
            "dual_clip_default",
            "verl's vanilla PPO loss always applies the dual clip at clip_ratio_c = 3 for "
            "negative advantages (the GRPO and PPO papers have none).",
            loss in ("vanilla", "bypass_ppo_clip"),
            f"loss_mode={mode!r}, clip_ratio_c={f.raw(_A + 'clip_ratio_c')!r}",
        ),
        _trap(
            "gspo_clip_range",
            loss == "gspo" and min(low or 0.2, high or 0.2) >= 0.01,
            f"loss_mode={mode!r}, clip_ratio_low={low!r}, clip_ratio_high={high!r}",
        ),
    ]
    return traps


# --------------------------------------------------------------------------- entry points


def translate(
    framework: str,
    fields: dict[str, Any],
    *,
    arm: str | None = None,
    source: str = "<input>",
    world_size: int | None = None,
    blanks_only: bool = False,
) -> Translation:
    """``fields`` of a ``framework`` configuration (``trl``: GRPOConfig field names; ``verl``:
    dotted keys) as a :class:`Translation`. Raises ConfigError for values the framework itself
    would refuse (an unknown loss type, a malformed number), naming ``source``."""

    # read, though no longer GRPOConfig fields: recipes written for earlier TRL carry them
    legacy = ("use_liger_loss", "warmup_ratio", "max_prompt_length", "torch_dtype")
    if framework == "trl":
        defaults: dict[str, Any] = TRL_DEFAULTS
        vocab: tuple[str, ...] = (*TRL_DEFAULTS, *TRL_OTHER_FIELDS, *legacy)
        known: Callable[[str], bool] = set(vocab).__contains__
        what = "GRPOConfig"
    elif framework == "verl":
        defaults, known = VERL_DEFAULTS, _verl_known
        vocab = (*VERL_DEFAULTS, *VERL_OTHER)
        what = "verl ppo_trainer.yaml"
    else:
        raise ConfigError(f"unknown framework '{framework}' (valid: {', '.join(FRAMEWORKS)})")
    unknown = _unknown(fields, known, vocab, what)
    unknown_names = {u["field"] for u in unknown}
    given = {k: v for k, v in fields.items() if k not in unknown_names}
    b = _Builder(_Fields(given, defaults, source))
    traps = _trl(b, world_size) if framework == "trl" else _verl(b)
    t = _finish(b, framework, source, arm, blanks_only)
    t.unknown = unknown
    why = TRL_IGNORED_WHY.get if framework == "trl" else _verl_why
    t.ignored = {k: why(k) for k in sorted(given) if k not in defaults and k not in legacy}
    t.traps = traps
    return t


def translate_file(
    framework: str,
    path: str | Path,
    *,
    arm: str | None = None,
    world_size: int | None = None,
    blanks_only: bool = False,
) -> Translation:
    """:func:`translate` of the configuration in ``path`` (:func:`read_fields`)."""

    fields = read_fields(path, framework)
    return translate(
        framework,
        fields,
        arm=arm,
        source=str(path),
        world_size=world_size,
        blanks_only=blanks_only,
    )
