"""What a translation is (:class:`Translation`): the arm, the experiment's settings, where each
setting comes from, what could not be carried over, the traps; and its two renderings, the YAML
to paste (the report as comments) and the JSON of ``--json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from .fields import SOURCES, plain, show_value
from .traps import Trap


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
            "arm": {self.arm_name: plain(self.arm())},
            "experiment": plain(self.experiment),
            "budget_note": self.budget_note,
            "preset": self.preset,
            "mapping": plain(self.mapping),
            "not_represented": plain(self.not_represented),
            "unknown": self.unknown,
            "ignored": self.ignored,
            "traps": [t.to_dict() for t in self.traps],
            "notes": self.notes,
        }

    def to_yaml(self) -> str:
        """The arm as YAML (paste it under ``arms:``), then the report as YAML comments."""

        head = [
            f"# {self.framework} configuration {self.source} as a sixblanks arm "
            f"(preset {self.preset})",
            f"# defaults: {SOURCES[self.framework]}",
            "# paste under arms: of an experiment file; sixblanks explain -c FILE "
            f"{self.arm_name} shows its blanks",
        ]
        body = yaml.safe_dump(
            {self.arm_name: plain(self.arm())}, sort_keys=False, default_flow_style=False
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
            lines.append(
                f"#   {m['path']}: {show_value(m['value'])}  <- {', '.join(m['from'])}{mark}"
            )
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
            text = yaml.safe_dump(plain(self.experiment), sort_keys=False, default_flow_style=False)
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
                lines.append(f"#   {n['field']}={show_value(n['value'])}: {n['reason']}")
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
