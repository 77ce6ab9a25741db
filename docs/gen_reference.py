"""The generated parts of the documentation, made at build time so that they can never drift.

A mkdocs hook (``mkdocs.yml``: ``hooks: [docs/gen_reference.py]``). A page marks a generated part
with a block::

    <!-- generated: NAME -->
    what a reader of the source sees (a note that the part is generated)
    <!-- /generated -->

and the build replaces the block with ``GENERATORS[NAME]()``:

- ``experiment-keys``: every section and key of the experiment file with its type, default and
  description, from the JSON Schema that ``sixblanks schema`` writes (``ExperimentConfig``; an
  arm's ``blanks`` are in it, as the override schema that ``ArmConfig`` derives from ``Blanks``)
  and the ledger counters a budget may limit;
- ``layout``: every module of ``sixblanks/``, ``algorithms/``, ``budgets/``, ``harness/`` and
  ``reports/`` with the first paragraph of its docstring (read with ``ast``: nothing imported).

``python docs/gen_reference.py NAME`` prints one part as the build would insert it.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"<!-- generated: ([\w-]+) -->\n.*?<!-- /generated -->", re.S)

# --------------------------------------------------------------------------- text helpers


def _cell(text: str) -> str:
    """One table cell: one line, pipes escaped outside code spans (a code span keeps its own)."""

    parts = re.split(r"(`[^`]+`)", " ".join(str(text).split()))
    return "".join(p if p.startswith("`") else p.replace("|", "\\|") for p in parts)


def _code(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return f"`{text}`" if "`" not in text else text


def _rst_to_md(text: str) -> str:
    """Docstring markup to Markdown: ``x`` and :role:`~a.b.c` become code spans; a ``<`` outside
    code becomes an entity (a bare ``<out>`` would be read as HTML)."""

    text = re.sub(r":\w+:`~?\.?([^`]+)`", lambda m: f"``{m.group(1)}``", text)
    parts = re.split(r"(``.+?``|`[^`]+`)", text)
    out = []
    for part in parts:
        if part.startswith("``") and part.endswith("``") and len(part) > 4:
            out.append(f"`{part[2:-2]}`")
        elif part.startswith("`") and part.endswith("`") and len(part) > 2:
            out.append(part)
        else:
            out.append(part.replace("<", "&lt;").replace("*", "\\*"))
    return "".join(out)


# --------------------------------------------------------------------------- the experiment file


class _Schema:
    """Renders a pydantic JSON Schema as sections of key tables."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.defs: dict[str, Any] = schema.get("$defs", {})
        self.anchors: dict[str, str] = {}  # a model's name -> the key path of its first section

    def resolve(self, s: dict[str, Any]) -> dict[str, Any]:
        ref = s.get("$ref")
        return self.defs[ref.split("/")[-1]] if ref else s

    def model(self, s: dict[str, Any]) -> dict[str, Any] | None:
        """The object schema with properties that ``s`` is (or may be: ``X or null``), else None."""

        s = self.resolve(s)
        if "properties" in s:
            return s
        for alt in s.get("anyOf", []):
            if alt.get("type") != "null":
                inner = self.resolve(alt)
                if "properties" in inner:
                    return inner
        return None

    def mapped_model(self, s: dict[str, Any], depth: int = 1) -> tuple[int, dict[str, Any]] | None:
        """(depth, model) where ``s`` maps names (to names, ...) to a model, else None."""

        for alt in [s, *[a for a in s.get("anyOf", []) if a.get("type") != "null"]]:
            extra = alt.get("additionalProperties")
            if isinstance(extra, dict):
                inner = self.model(extra)
                if inner is not None:
                    return depth, inner
                deeper = self.mapped_model(extra, depth + 1)
                if deeper is not None:
                    return deeper
        return None

    def type_of(self, s: dict[str, Any]) -> str:
        if "$ref" in s:
            name = s["$ref"].split("/")[-1]
            path = self.anchors.get(name)
            return f"[`{path}`](#{_anchor(path)})" if path else name
        if "anyOf" in s:
            kinds = [self.type_of(a) for a in s["anyOf"] if a.get("type") != "null"]
            nullable = any(a.get("type") == "null" for a in s["anyOf"])
            return " or ".join(kinds) + (" or null" if nullable else "")
        if "enum" in s:
            values = s["enum"]
            spelt = [v for v in values if isinstance(v, str) and v.replace("_", "-") in values]
            spelt = [v for v in spelt if "_" in v]  # another spelling of a hyphenated choice
            text = "one of " + ", ".join(_code(v) for v in values if v not in spelt)
            return text + (", `_` for `-` too" if spelt else "")
        if "const" in s:
            return _code(s["const"])
        t = s.get("type")
        if t == "array":
            items, fixed = s.get("items"), s.get("prefixItems")
            if fixed and s.get("minItems") == s.get("maxItems") == len(fixed):  # a tuple
                return f"list of {len(fixed)}: " + ", ".join(self.type_of(i) for i in fixed)
            text = f"list of {self.type_of(items)}" if items else "list"
            return text + (f", at least {s['minItems']}" if "minItems" in s else "")
        if t == "object" and "properties" not in s:
            extra = s.get("additionalProperties", True)
            if isinstance(extra, dict):
                return f"mapping: name to {self.type_of(extra)}"
            return "mapping"
        if isinstance(t, list):
            return " or ".join(t)
        bounds = [
            (">=", s.get("minimum")),
            (">", s.get("exclusiveMinimum")),
            ("<=", s.get("maximum")),
            ("<", s.get("exclusiveMaximum")),
            ("length >=", s.get("minLength")),
        ]
        text = str(t or "any")
        limits = [f"{op} {v}" for op, v in bounds if v is not None]
        return text + (f", {', '.join(limits)}" if limits else "")

    def rows(
        self, obj: dict[str, Any], path: str, sections: list[tuple[str, dict[str, Any], str]]
    ) -> list[str]:
        """Table rows of one object's keys; nested objects are queued as sections of their own."""

        required = set(obj.get("required", []))
        out = []
        for key, prop in obj.get("properties", {}).items():
            full = f"{path}.{key}" if path else key
            sub = self.model(prop)
            if sub is not None:
                kind = f"object, [below](#{_anchor(full)})"
                if "anyOf" in prop:
                    kind += " or null"
                if "default" in prop and prop["default"] in (None, {}):  # none; an empty override
                    default = _code(prop["default"])
                else:
                    default = "see below"
                sections.append((full, sub, prop.get("description", "")))
                self.anchors.setdefault(sub.get("title", ""), full)
            else:
                mapped = self.mapped_model(prop)
                if mapped is not None and mapped[1].get("title") not in self.anchors:
                    names = PLACEHOLDERS.get(full, ".".join(["<name>"] * mapped[0]))
                    self.anchors[mapped[1].get("title", "")] = f"{full}.{names}"
                    sections.append((f"{full}.{names}", mapped[1], ""))
                kind = self.type_of(prop)
                if "default" in prop:
                    default = _code(prop["default"])
                else:
                    default = "required" if key in required else "-"
            desc = prop.get("description", "")
            out.append(
                f"| `{full}` | {_cell(kind)} | {_cell(default)} | {_cell(_rst_to_md(desc))} |"
            )
        return out


PLACEHOLDERS = {"arms": "<arm>", "sweep.space": "<arm>.<field>"}
"""What the names of a mapping's keys stand for, where a generic ``<name>`` says too little."""


def _anchor(path: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-")


def _table(rows: list[str]) -> list[str]:
    return ["| key | type | default | description |", "|---|---|---|---|", *rows, ""]


def _render_sections(
    schema: _Schema,
    sections: list[tuple[str, dict[str, Any], str]],
    level: int,
    apart: dict[str, tuple[str, dict[str, Any], str]] | None = None,
) -> list[str]:
    """Each section's heading, text and key table, depth first; a section whose path is a key of
    ``apart`` is not rendered but put there (with its subsections), for the caller to place."""

    out: list[str] = []
    while sections:
        path, obj, desc = sections.pop(0)
        if apart is not None and path in apart:
            apart[path] = (path, obj, desc)
            continue
        out.append(f"{'#' * level} `{path}` {{#{_anchor(path)}}}")
        out.append("")
        text = desc or obj.get("description", "")
        if text:
            out += [_rst_to_md(" ".join(text.split())), ""]
        nested: list[tuple[str, dict[str, Any], str]] = []
        out += _table(schema.rows(obj, path, nested))
        sections[:0] = nested  # depth first: a section's subsections follow it
    return out


def _task_params(schema: _Schema, task: dict[str, Any]) -> list[str]:
    """``task.params`` per built-in task, from the schema's ``if name == X then params`` rules."""

    out = [
        "#### `task.params` {#task-params}",
        "",
        "The parameters of each built-in task (every task also takes `system_prompt` and "
        "`observation_role`):",
        "",
    ]
    for rule in task.get("allOf", []):
        name = rule.get("if", {}).get("properties", {}).get("name", {}).get("const")
        params = rule.get("then", {}).get("properties", {}).get("params")
        if name is None or params is None:
            continue
        out += [f"##### `task.params` of `{name}` {{#task-params-{_anchor(name)}}}", ""]
        out += _table(schema.rows(params, "task.params", []))
    return out


def _models(cls: Any) -> dict[str, Any]:
    """Every pydantic model reachable from ``cls``'s fields, by its schema title."""

    from pydantic import BaseModel

    found: dict[str, Any] = {}

    def walk(tp: Any) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            title = tp.model_config.get("title") or tp.__name__
            if title in found:
                return
            found[title] = tp
            for f in tp.model_fields.values():
                walk(f.annotation)
        for arg in getattr(tp, "__args__", ()) or ():
            walk(arg)

    walk(cls)
    return found


def _fill_factory_defaults(cls: Any, raw: dict[str, Any]) -> None:
    """A default made by a factory (``Field(default_factory=...)``) is not in the JSON Schema:
    put it there, so that the reference shows it."""

    from pydantic_core import to_jsonable_python

    for title, model in _models(cls).items():
        obj = raw if title == raw.get("title") else raw.get("$defs", {}).get(title)
        if obj is None:
            continue
        for name, field in model.model_fields.items():
            prop = obj.get("properties", {}).get(field.alias or name)
            if prop is not None and "default" not in prop and field.default_factory is not None:
                prop["default"] = to_jsonable_python(field.get_default(call_default_factory=True))


def _budget_keys(prop: dict[str, Any]) -> list[str]:
    """The ``budget`` section: every ledger counter as a key."""

    from sixblanks.budgets.counters import COUNTERS
    from sixblanks.budgets.ledger import TIME_COUNTERS

    out: list[str] = []
    out += [
        "### `budget` {#budget}",
        "",
        _rst_to_md(prop.get("description", "")) + " Any ledger counter may be limited "
        "(the same keys in `ladder.budget`, `sweep.trial_budget` and "
        "`sweep.total_budget`):",
        "",
        "| key | type | default | description |",
        "|---|---|---|---|",
    ]
    out += [
        f"| `budget.{k}` | {'seconds, > 0' if k in TIME_COUNTERS else 'whole number, > 0'} | "
        f"no limit | {_cell(v)} |"
        for k, v in COUNTERS.items()
    ]
    out.append("")
    return out


def _arm_keys(schema: _Schema, prop: dict[str, Any]) -> list[str]:
    """The ``arms.<arm>`` section, then ``arms.<arm>.blanks`` with a subsection per blank: the
    override schema that ``ArmConfig`` puts in the experiment file's schema (``Blanks``'s)."""

    blanks_path = "arms.<arm>.blanks"
    arm = schema.resolve(prop["additionalProperties"])
    apart: dict[str, tuple[str, dict[str, Any], str]] = {blanks_path: ("", {}, "")}
    out = _render_sections(
        schema, [("arms.<arm>", arm, "One arm: a preset and its overrides.")], 3, apart
    )
    path, blanks, desc = apart[blanks_path]
    if not blanks:
        raise ValueError(f"the experiment file's schema has no keys under {blanks_path}")
    out += [
        f"### `{path}` {{#{_anchor(path)}}}",
        "",
        _rst_to_md(" ".join(desc.split())) + " The blanks are described in "
        "[the six blanks](../algorithms.md). A key with no default (`-`) must be given where the "
        "preset leaves its section unset (`null`); the checks that join several blanks are "
        "`sixblanks validate`'s.",
        "",
    ]
    nested: list[tuple[str, dict[str, Any], str]] = []
    out += _table(schema.rows(blanks, path, nested))
    out += _render_sections(schema, nested, 4)
    return out


def experiment_keys() -> str:
    """Every key of the experiment file, by section."""

    from sixblanks.harness.config import ExperimentConfig

    raw = ExperimentConfig.model_json_schema()
    _fill_factory_defaults(ExperimentConfig, raw)
    schema = _Schema(raw)
    schema.anchors["ArmConfig"] = "arms.<arm>"
    out = [
        "Generated from the JSON Schema of the experiment file (`sixblanks schema`), so it always "
        "matches the code that parses it. Keys are dotted paths; `<arm>` is an arm's name. "
        "A key left out takes its default; an unknown key is an error.",
        "",
        "### Top level {#top-level}",
        "",
    ]
    sections: list[tuple[str, dict[str, Any], str]] = []
    out += _table(schema.rows(raw, "", sections))
    queued = {path: (path, obj, desc) for path, obj, desc in sections}
    task_def = schema.model(raw["properties"]["task"])

    for key, prop in raw["properties"].items():
        if key in queued:
            out += [
                line.replace("| mapping |", "| mapping, by task: [below](#task-params) |")
                if line.startswith("| `task.params` |")
                else line
                for line in _render_sections(schema, [queued[key]], 3)
            ]
        if key == "task" and task_def is not None:
            out += _task_params(schema, task_def)
            out += [
                "`tasks` (several tasks) is a list of items with the keys of `task`. A task "
                "registered by a module (`module:Class`, `reasoning_gym:<dataset>`) takes the "
                "parameters of its own `Params`.",
                "",
            ]
        elif key == "budget":  # a mapping: any ledger counter may be limited
            out += _budget_keys(prop)
        elif key == "arms":  # a mapping of arm name to ArmConfig, whose blanks are Blanks
            out += _arm_keys(schema, prop)
    return "\n".join(out)


# --------------------------------------------------------------------------- the layout

PACKAGES = ("sixblanks", "algorithms", "budgets", "harness", "reports")
LONG = 360  # a first paragraph longer than this is cut to its first sentence


def _summary(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paras = doc.strip().split("\n\n")
    para = " ".join(paras[0].split())
    if para.endswith(":") and len(paras) > 1 and paras[1].startswith("    "):
        shown = paras[1].strip()  # a one-line display that the first paragraph introduces
        if "\n" not in shown and "`" not in shown:
            para += f" ``{shown}``"
    if len(para) > LONG:  # the first sentence: a full stop, a space, then a capital (or anything)
        ends = [m.end() for m in re.finditer(r"(?<!e\.g)(?<!i\.e)\.\s", para)]
        capital = [e for e in ends if para[e : e + 1].isupper()]
        if capital or ends:
            para = para[: (capital or ends)[0]].rstrip()
    return _rst_to_md(para.rstrip(":"))


def layout() -> str:
    """Every module of the five top-level folders, with its docstring's first paragraph."""

    out = [
        "Generated from the docstrings of the modules (their first paragraph), so it changes "
        "with the code. A folder's `__init__.py` describes the folder.",
        "",
    ]
    for top in PACKAGES:
        folders = sorted(
            {p.parent for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts}
        )
        for folder in folders:
            rel = folder.relative_to(ROOT).as_posix()
            out += [f"### `{rel}/` {{#{_anchor(rel)}}}", ""]
            init = folder / "__init__.py"
            modules = sorted(folder.glob("*.py"))
            if init.exists() and _summary(init) and len(modules) > 1:
                out += [_summary(init), ""]
            out += ["| file | what it is |", "|---|---|"]
            for path in modules:
                if path.name == "__init__.py" and len(modules) > 1:
                    continue
                out.append(
                    f"| `{path.relative_to(ROOT).as_posix()}` | {_cell(_summary(path)) or '-'} |"
                )
            out.append("")
    return "\n".join(out)


GENERATORS: dict[str, Callable[[], str]] = {"experiment-keys": experiment_keys, "layout": layout}

# --------------------------------------------------------------------------- the mkdocs hook

_cache: dict[str, str] = {}


def on_pre_build(config: Any) -> None:
    _cache.clear()


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    def fill(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in GENERATORS:
            raise ValueError(f"{page.file.src_path}: unknown generated block '{name}'")
        if name not in _cache:
            _cache[name] = GENERATORS[name]()
        return _cache[name]

    return BLOCK.sub(fill, markdown)


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in GENERATORS:
        sys.exit(f"usage: python docs/gen_reference.py {{{','.join(GENERATORS)}}}")
    sys.stdout.write(GENERATORS[sys.argv[1]]() + "\n")
