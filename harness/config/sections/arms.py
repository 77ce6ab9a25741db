"""An ``arms`` entry: the preset, its blanks' overrides, the rollout and optimizer settings an arm
may change, and a planted fault."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_serializer

from sixblanks.algorithms.presets import PRESETS

from .base import Section
from .optimizer import OptimizerOverride
from .rollout import MismatchConfig


class RolloutOverride(Section):
    """Rollout settings an arm may change (the fairness audit flags the difference). The group size
    is the data blank's (``blanks: {data: {group_size: G}}``)."""

    temperature: float | None = Field(None, gt=0, le=10)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0)
    max_new_tokens: int | None = Field(None, gt=0)
    prompts_per_step: int | None = Field(None, ge=1)
    mismatch: MismatchConfig | None = Field(
        None,
        description="The arm's sampler-trainer mismatch: the keys set here replace the "
        "experiment's rollout.mismatch keys (the others keep its values).",
    )

    @model_serializer(mode="wrap")
    def _omit_defaults(self, handler):
        out = handler(self)
        if self.mismatch is None:  # as before the key existed
            out.pop("mismatch", None)
        return out


REWARD_FAULTS = ("none", "shuffle")
"""The planted faults of the training rewards (``arms.<arm>.fault.rewards``)."""


class FaultConfig(Section):
    """A fault planted in an arm's training (a negative control: a check that a comparison can see
    an arm that must lose). Training only: the held-out evaluation and the ledger are untouched, and
    the fairness audit flags the arm (item ``fault``)."""

    rewards: Literal["none", "shuffle"] = Field(
        "none",
        description="shuffle: before the advantages are computed, each training batch's outcome "
        "rewards (with each row's per-turn rewards) are permuted at random across its rows, seeded "
        "by the run's seed and step, so the policy learns from rewards unrelated to its answers "
        "(the logged reward_mean stays the true one); none: the rewards as they are.",
    )


def _models_in(root: Any) -> dict[str, Any]:
    """Every pydantic model reachable from ``root`` through its fields' annotations (``root``
    first), by class name, in the order first met."""

    from pydantic import BaseModel

    models: dict[str, type[BaseModel]] = {}

    def collect(tp: Any) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if tp.__name__ not in models:
                models[tp.__name__] = tp
                for f in tp.model_fields.values():
                    collect(f.annotation)
        for arg in getattr(tp, "__args__", ()) or ():
            collect(arg)

    collect(root)
    return models


def _add_underscore_spellings(raw: dict[str, Any], defs: dict[str, Any], root: Any) -> None:
    """Each string choice (``enum``) in ``raw`` (the schema of ``root``) and its ``defs`` gets its
    underscore spelling added, in place, where the model itself accepts that spelling for the field
    (``token-sum`` -> ``token_sum``)."""

    from pydantic import ValidationError

    for name, model in _models_in(root).items():
        obj = raw if model is root else defs.get(name, {})
        for key, prop in obj.get("properties", {}).items():
            for alt in [prop, *prop.get("anyOf", [])]:
                choices = alt.get("enum", [])
                for value in [v for v in choices if isinstance(v, str) and "-" in v]:
                    spelt = value.replace("-", "_")
                    if spelt in choices:
                        continue
                    try:
                        model.model_validate({key: spelt})
                    except ValidationError as exc:
                        if any(e["loc"][:1] == (key,) for e in exc.errors()):
                            continue  # refused: another field's error is not this one's
                    choices.append(spelt)


_SUBSCHEMAS = ("items", "additionalProperties", "not", "if", "then", "else")
"""The keywords whose value is one subschema (a dict), which an override recurses into."""


def _override(
    node: dict[str, Any], defs: dict[str, Any], seen: tuple[str, ...] = ()
) -> dict[str, Any]:
    """``node`` as an override's schema: its references to ``defs`` inlined (ValueError for a
    model that contains itself) and no key required at any depth."""

    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        if name in seen:
            raise ValueError(f"blanks schema: {name} contains itself")
        rest = {k: v for k, v in node.items() if k != "$ref"}
        return _override({**defs[name], **rest}, defs, (*seen, name))
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k == "required":
            continue  # an override: the preset's value stands for a key left out
        if k == "properties":
            out[k] = {p: _override(s, defs, seen) for p, s in v.items()}
        elif k in ("anyOf", "oneOf", "allOf", "prefixItems"):
            out[k] = [_override(s, defs, seen) for s in v]
        elif k in _SUBSCHEMAS and isinstance(v, dict):
            out[k] = _override(v, defs, seen)
        else:
            out[k] = v
    return out


class ArmConfig(Section):
    @staticmethod
    def _blanks_schema(schema: dict[str, Any]) -> None:
        """The JSON Schema of ``blanks`` (pydantic validates a plain dict, merged into the preset's
        blanks by :func:`~sixblanks.algorithms.presets.resolve`): ``Blanks``'s own schema as an
        override, every key optional at every depth and unknown keys refused as the blank models
        refuse them; its references (``$ref``) inlined (the experiment file's ``$defs`` are not
        Blanks'), and each string choice's underscore spelling added where the model itself
        accepts it (``normalization.mode: token_sum``). Made when the schema is, from the models:
        nothing here is a copy."""

        from sixblanks.algorithms.blanks import Blanks

        raw = Blanks.model_json_schema()
        defs: dict[str, Any] = raw.pop("$defs", {})
        _add_underscore_spellings(raw, defs, Blanks)
        blanks = _override(raw, defs)
        schema["type"] = "object"
        schema["properties"] = blanks["properties"]
        schema["additionalProperties"] = blanks.get("additionalProperties", True)

    preset: str = Field(
        description="A preset name: sixblanks explain --list.",
        json_schema_extra={"enum": sorted(PRESETS)},  # an editor flags a misspelt preset
    )
    blanks: dict[str, Any] = Field(
        default_factory=dict,
        description="Overrides of the preset's blanks: any field of any blank, nested as in the "
        "blank (`weight: {eps_high: 0.28}`); a key left out keeps the preset's value (`sixblanks "
        "explain PRESET`). The defaults shown are the template's, which a preset changes.",
        json_schema_extra=_blanks_schema,
    )
    optimizer: OptimizerOverride = OptimizerOverride()
    rollout: RolloutOverride = RolloutOverride()
    search_budget: dict[str, float] | None = Field(
        None,
        description="What tuning this arm's settings cost (ledger counters summed over its search "
        "trials); set by `sixblanks sweep` on its tuned arms. None: not tuned. The audit flags "
        "arms that differ.",
    )
    seed_offset: int = Field(
        0,
        description="Added to the seed of every run of this arm for all its training randomness "
        "(instances drawn, sampling, batch order, anything seeded by the run): two arms identical "
        "but for it are independent draws of one setting. The held-out evaluation (its instances "
        "and sampling) keeps the experiment's seed, and the run's `seed` stays the experiment's, "
        "so runs still pair by seed across arms. The fairness audit records it, never flags it.",
    )
    fault: FaultConfig = Field(
        default_factory=FaultConfig,
        description="A fault planted in the arm's training (a negative control); the fairness "
        "audit flags it.",
    )
    tools: bool = Field(
        True,
        description="Whether this arm's episodes are offered the experiment's code tool (its "
        "`tools:` section; nothing where it has none). false: the arm answers without it, from the "
        "same warm start (which then demonstrates both ways); the fairness audit records the "
        "difference.",
    )

    def run_fields(self) -> dict[str, Any]:
        """What a run spec of this arm carries beyond its blanks, optimizer and rollout: the
        settings away from their defaults (none: {}, so default arms' run ids do not change)."""

        out: dict[str, Any] = {}
        if self.seed_offset:
            out["seed_offset"] = self.seed_offset
        if self.fault.rewards != "none":
            out["fault"] = self.fault.model_dump(mode="json")
        return out
