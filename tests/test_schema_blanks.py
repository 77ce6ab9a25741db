"""The blanks in the experiment file's JSON Schema: ``sixblanks schema`` types
``arms.<arm>.blanks`` as an override of ``Blanks`` (every field, its type, choices and description;
every key optional at any depth; unknown keys refused), so an editor completes and checks
``arms.<arm>.blanks.weight.trust_region`` like any other key; every shipped experiment file
validates against it; the generated reference lists every blank field; and how blanks are parsed
at run time (and so every run id) is unchanged."""

from __future__ import annotations

import importlib.util
import json
import typing
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel, ValidationError

from sixblanks.algorithms.blanks import Blanks
from sixblanks.algorithms.presets import resolve
from sixblanks.harness.config.bases import file_schema
from sixblanks.harness.config.finding_file import FindingSection
from sixblanks.harness.config.loading import parse_yaml
from sixblanks.harness.config.sections import ArmConfig

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_LINE = "# yaml-language-server: $schema="


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    # what `sixblanks schema` writes: the configuration's, and base: beside it
    return file_schema()


@pytest.fixture(scope="module")
def check(schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _blanks(schema: dict[str, Any]) -> dict[str, Any]:
    return schema["$defs"]["ArmConfig"]["properties"]["blanks"]


def _errors(check: jsonschema.Draft202012Validator, doc: Any) -> list[tuple[list[Any], str]]:
    """(key path, message) of each error, as an editor shows it: inside an ``X or null`` key (an
    ``anyOf``), the error of the alternative that fits best."""

    out = []
    for error in check.iter_errors(doc):
        best = jsonschema.exceptions.best_match([error])
        out.append((list(best.absolute_path), best.message))
    return out


def _object(s: dict[str, Any]) -> dict[str, Any] | None:
    """The object schema (with properties) that ``s`` is, or may be (``X or null``)."""

    for alt in [s, *s.get("anyOf", [])]:
        if "properties" in alt:
            return alt
    return None


def _fields(model: type[BaseModel], prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """{dotted path: (field, annotation)} of every field of ``model`` and of the models in it."""

    out: dict[str, tuple[Any, Any]] = {}
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        out[path] = (field, field.annotation)
        inner = [field.annotation, *typing.get_args(field.annotation)]
        for tp in inner:
            if isinstance(tp, type) and issubclass(tp, BaseModel):
                out.update(_fields(tp, f"{path}."))
    return out


def _at(blanks: dict[str, Any], dotted: str) -> dict[str, Any]:
    node: dict[str, Any] = blanks
    for part in dotted.split("."):
        obj = _object(node)
        assert obj is not None, f"{dotted}: {part} is not under an object"
        node = obj["properties"][part]
    return node


# --------------------------------------------------------------------------- the schema


def test_sixblanks_schema_writes_the_blanks(cli, tmp_path, schema):
    """What `sixblanks schema -o` writes (the file experiment files name) is the schema checked
    here, and it types the blanks: no longer "any object"."""

    target = tmp_path / "sixblanks.schema.json"
    code, _, _ = cli("--quiet", "schema", "-o", str(target))
    assert code == 0
    written = json.loads(target.read_text())
    assert written == json.loads(json.dumps(schema))
    blanks = _blanks(written)
    assert blanks["type"] == "object" and blanks["additionalProperties"] is False
    assert set(blanks["properties"]) == set(Blanks.model_fields)
    trust = blanks["properties"]["weight"]["properties"]["trust_region"]
    assert trust["enum"] == ["none", "clip", "sapo", "dis", "cispo", "dppo_tv", "dppo_kl"]
    assert trust["description"].startswith("clip: PPO min(rA, clip(r)A)")


def test_every_blank_field_is_in_the_schema_with_its_type_and_description(schema):
    """Derived from the models, not copied: every field of every blank (at any depth) is at its
    path with the model's description, and every Literal's choices are its enum."""

    blanks = _blanks(schema)
    fields = _fields(Blanks)
    assert "weight.gate.mode" in fields and "data.concurrent.inflight.on_pass" in fields
    for dotted, (field, annotation) in fields.items():
        prop = _at(blanks, dotted)
        if field.description:
            assert prop.get("description") == field.description, dotted
        literals = [a for a in [annotation, *typing.get_args(annotation)] if a is not None]
        for tp in literals:
            if typing.get_origin(tp) is typing.Literal:
                alts = [prop, *prop.get("anyOf", [])]
                enum = [
                    v for a in alts for v in a.get("enum", [a["const"]] if "const" in a else [])
                ]
                assert set(typing.get_args(tp)) <= set(enum), dotted


def test_the_blanks_schema_is_an_override_that_refuses_unknown_keys(schema):
    """Every object in the blanks, at any depth, refuses unknown keys (as the blank models do) and
    requires none (a key left out keeps the preset's value); no reference is left dangling."""

    objects: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            assert "$ref" not in node and "required" not in node, sorted(node)
            if "properties" in node:
                objects.append(node)
                for sub in node["properties"].values():
                    walk(sub)
            for key in ("anyOf", "prefixItems"):
                for sub in node.get(key, []):
                    walk(sub)

    walk(_blanks(schema))
    assert len(objects) > 20
    assert all(o["additionalProperties"] is False for o in objects)
    # Blanks's own schema requires a staleness bound's versions; the override requires nothing
    assert "versions" in Blanks.model_json_schema()["$defs"]["StalenessBound"]["required"]


# --------------------------------------------------------------------------- the shipped files


def _experiment_files() -> list[Path]:
    """experiments.yaml, experiments/*.yaml and every examples/ YAML that is an experiment (a
    mapping with arms; the foreign recipes under examples/foreign are not, nor is a finding file,
    whose `finding` section `sixblanks validate` checks apart)."""

    files = [ROOT / "experiments.yaml", *sorted((ROOT / "experiments").glob("*.yaml"))]
    for path in sorted((ROOT / "examples").rglob("*.y*ml")):
        data = parse_yaml(path.read_text(encoding="utf-8"), str(path))
        if isinstance(data, dict) and "arms" in data and "finding" not in data:
            files.append(path)
    return files


EXPERIMENTS = _experiment_files()
FINDINGS = sorted((ROOT / "experiments" / "findings").glob("*.yaml"))


def test_the_shipped_files_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in EXPERIMENTS}
    shipped = {"experiments.yaml", "experiments/async.yaml", "examples/preference/experiment.yaml"}
    assert shipped <= names
    assert not any(n.startswith("examples/foreign/") for n in names)
    assert len(FINDINGS) >= 10


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_shipped_experiment_names_the_schema_and_passes_it(path, check):
    text = path.read_text(encoding="utf-8")
    first = text.splitlines()[0]
    assert first.startswith(SCHEMA_LINE), f"{path.name}: its editor is not pointed at the schema"
    named = (path.parent / first[len(SCHEMA_LINE) :].strip()).resolve()
    assert named == ROOT / "sixblanks.schema.json"
    data = parse_yaml(text, str(path))
    assert _errors(check, data) == []


@pytest.mark.parametrize("path", FINDINGS, ids=lambda p: p.name)
def test_every_finding_passes_the_schema_but_for_its_finding_section(path, check):
    """A finding file is an experiment plus a ``finding:`` section that the experiment file's
    schema does not know (``load_finding`` takes it out, then checks the rest as an experiment):
    the rest passes the schema, the section passes FindingSection's own schema, and the file does
    not name the experiment schema (an editor would flag ``finding`` as an unknown key)."""

    text = path.read_text(encoding="utf-8")
    assert SCHEMA_LINE not in text
    data = parse_yaml(text, str(path))
    assert [m for _, m in _errors(check, data)] == [
        "Additional properties are not allowed ('finding' was unexpected)"
    ]
    finding = data.pop("finding")
    assert _errors(check, data) == []
    section = jsonschema.Draft202012Validator(FindingSection.model_json_schema())
    assert list(section.iter_errors(finding)) == []


# --------------------------------------------------------------------------- what it catches


def _arm(blanks: dict[str, Any], preset: str = "grpo") -> dict[str, Any]:
    return {"arms": {"a": {"preset": preset, "blanks": blanks}}}


def test_a_misspelt_blank_field_fails_the_schema_and_the_run(check):
    for blanks, where, key in [
        ({"weight": {"trust_regon": "clip"}}, ["weight"], "trust_regon"),
        ({"weigth": {"trust_region": "clip"}}, [], "weigth"),
        (
            {"data": {"concurrent": {"inflight": {"version": 2}}}},
            ["data", "concurrent", "inflight"],
            "version",
        ),
        ({"advantage": {"critic": {"lamda": 0.9}}}, ["advantage", "critic"], "lamda"),
    ]:
        errors = _errors(check, _arm(blanks))
        assert errors == [
            (
                ["arms", "a", "blanks", *where],
                f"Additional properties are not allowed ('{key}' was unexpected)",
            )
        ], blanks
        with pytest.raises(ValidationError, match=key):
            resolve("grpo", blanks)  # the run refuses it too


def test_a_wrong_choice_or_type_fails_the_schema_and_the_run(check):
    for blanks, where in [
        ({"weight": {"trust_region": "clipp"}}, ["weight", "trust_region"]),
        ({"advantage": {"estimator": "grpo"}}, ["advantage", "estimator"]),
        ({"normalization": {"mode": "token-means"}}, ["normalization", "mode"]),
        ({"weight": {"gate": {"mode": "cut"}}}, ["weight", "gate", "mode"]),
        ({"weight": {"eps_high": 0}}, ["weight", "eps_high"]),
        ({"data": {"group_size": "eight"}}, ["data", "group_size"]),
        ({"data": {"accuracy_filter": [0.1]}}, ["data", "accuracy_filter"]),
    ]:
        errors = _errors(check, _arm(blanks))
        assert [path for path, _ in errors] == [["arms", "a", "blanks", *where]], (blanks, errors)
        with pytest.raises(ValidationError):
            resolve("grpo", blanks)
    [(_, message)] = _errors(check, _arm({"weight": {"trust_region": "clipp"}}))
    assert "'clipp' is not one of ['none', 'clip', 'sapo'" in message


def test_a_valid_deep_override_passes_the_schema_and_the_run(check):
    blanks = {
        "weight": {"eps_high": 0.28, "gate": {"level": "sequence", "mode": "mask", "high": 3}},
        "advantage": {"lam": 0.95, "critic": {"vf_coef": 0.2}, "prm": {"calibration_bins": 10}},
        "normalization": {"mode": "token_sum"},  # the model takes underscores for hyphens
        "regularizer": {"loss_kl_coef": 0.001, "loss_kl_estimator": "k3+"},
        "data": {
            "overlong_shaping": {"enabled": True, "cache": 8},
            "accuracy_filter": [0.1, 0.9],
            "dynamic_sampling": True,
        },
    }
    assert _errors(check, _arm(blanks)) == []
    resolved = resolve("grpo", blanks)
    assert resolved.weight.gate.level == "sequence" and resolved.normalization.mode == "token-sum"
    # an override names only what it changes, at any depth: the preset's value stands for the rest
    partial = {"data": {"concurrent": {"consume": "episode", "queued": {"on_pass": "wait"}}}}
    assert _errors(check, _arm(partial)) == []


def test_every_underscore_spelling_in_the_schema_is_one_the_model_takes(schema):
    mode = _blanks(schema)["properties"]["normalization"]["properties"]["mode"]
    spelt = [v for v in mode["enum"] if "_" in v]
    assert "token_sum" in spelt and len(spelt) == len([v for v in mode["enum"] if "-" in v])
    for value in spelt:
        assert resolve("grpo", {"normalization": {"mode": value}}).normalization.mode == (
            value.replace("_", "-")
        )
    # choices with no hyphen (an underscore of their own) are listed as the model has them
    tis = _blanks(schema)["properties"]["weight"]["properties"]["tis_form"]["enum"]
    assert tis == ["token", "sequence", "token_mask", "sequence_mask"]


# --------------------------------------------------------------------------- run time unchanged


def test_blanks_are_still_parsed_as_a_plain_override():
    """Only the schema changed: the field is the dict it was, dumped as given (so run ids and
    every stored definition stay as they were; tests/test_golden.py checks the ids)."""

    assert ArmConfig.model_fields["blanks"].annotation == dict[str, Any]
    given = {"weight": {"eps_high": 0.28}, "data": {"group_size": 4}}
    arm = ArmConfig(preset="dapo", blanks=given)
    assert arm.blanks == given
    assert arm.model_dump()["blanks"] == given
    assert ArmConfig(preset="grpo").model_dump()["blanks"] == {}


# --------------------------------------------------------------------------- the reference


def _reference() -> str:
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs/gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.experiment_keys()


def test_the_reference_lists_every_blank_field_once():
    text = _reference()
    rows = [line for line in text.splitlines() if line.startswith("| `arms.<arm>.blanks.")]
    keys = [row.split("`")[1] for row in rows]
    assert len(keys) == len(set(keys))
    assert set(keys) == {f"arms.<arm>.blanks.{p}" for p in _fields(Blanks)}
    trust = next(r for r in rows if r.startswith("| `arms.<arm>.blanks.weight.trust_region` |"))
    assert '`"clip"`, `"sapo"`' in trust and "sapo: soft gate" in trust
    headings = [line for line in text.splitlines() if line.startswith("#") and "blanks" in line]
    assert headings[0] == "### `arms.<arm>.blanks` {#arms-arm-blanks}"
    assert "#### `arms.<arm>.blanks.weight.gate` {#arms-arm-blanks-weight-gate}" in headings
    assert len(headings) == len(set(headings))
    mode = next(r for r in rows if r.startswith("| `arms.<arm>.blanks.normalization.mode` |"))
    assert "`_` for `-` too" in mode and '"token_sum"' not in mode
