"""``reasoning_gym:<dataset>``: any reasoning-gym procedural dataset, scored by its own scorer."""

from __future__ import annotations

import dataclasses
import string
from functools import lru_cache
from typing import Any

from pydantic import Field, ValidationInfo, field_validator

from .base import Instance, Task, TaskParams


class ReasoningGymParams(TaskParams):
    config: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of the dataset's config."
    )

    @field_validator("config")
    @classmethod
    def _config(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        dataset = (info.context or {}).get("dataset")
        if dataset is not None:
            check_config(dataset, v)
        return v


@lru_cache(maxsize=1)
def dataset_names() -> tuple[str, ...]:
    import reasoning_gym

    return tuple(sorted(reasoning_gym.factory.DATASETS))


PER_INSTANCE = ("size", "seed")
"""Config fields the task sets itself: every instance is ``size=1`` at the instance's seed."""


def check_config(dataset: str, config: dict[str, Any]) -> None:
    """Raise ValueError (``key: reason``) where ``config`` would not make ``dataset``'s config:
    an unknown or per-instance key, or a value its own ``validate()`` refuses. Builds the config
    dataclass only (no instance is generated), so the experiment validator can run it."""

    import reasoning_gym

    from ..errors import unknown_name

    if dataset not in reasoning_gym.factory.DATASETS:
        return  # the registry names the unknown dataset
    _, config_cls = reasoning_gym.factory.DATASETS[dataset]
    fields = {f.name for f in dataclasses.fields(config_cls) if f.init}
    settable = sorted(fields - set(PER_INSTANCE))
    for key in config:
        if key in PER_INSTANCE:
            raise ValueError(
                f"{key}: set by the task (each instance is size 1 at its own seed); leave it out"
            )
        if key not in fields:
            raise ValueError(f"{key}: {unknown_name('key', str(key), settable)}")
    try:
        cfg = config_cls(size=1, seed=0, **config)
        if hasattr(cfg, "validate"):
            cfg.validate()
    except Exception as exc:  # noqa: BLE001 - reasoning-gym validates with asserts and TypeErrors
        why = str(exc) or type(exc).__name__
        raise ValueError(f"reasoning-gym's {config_cls.__name__} refuses it: {why}") from None


class ReasoningGymTask(Task):
    """One reasoning-gym dataset. Each instance is ``create_dataset(name, size=1, seed=seed)[0]``,
    so instances are deterministic in their seed; its questions are split by their text (the hash
    partition of harness/tasks/base.py), so a question a training seed makes is never a held-out
    one. Its space is not listed: a dataset config with few distinct questions is not cautioned
    before a run, and its held-out set holds the distinct ones its walk finds."""

    Params = ReasoningGymParams
    has_oracle = True
    params: ReasoningGymParams

    def __init__(self, dataset: str, params: dict[str, Any] | TaskParams | None = None):
        if not isinstance(params, TaskParams):
            # the dataset's config is checked here, at construction (so at `sixblanks validate`),
            # not at the first instance inside a run
            params = ReasoningGymParams.model_validate(params or {}, context={"dataset": dataset})
        super().__init__(params)
        self.dataset = dataset
        self.name = f"reasoning_gym:{dataset}"  # type: ignore[misc]
        self._cache: dict[int, tuple[Any, dict]] = {}

    def _entry(self, seed: int) -> tuple[Any, dict]:
        if seed not in self._cache:
            import reasoning_gym

            ds = reasoning_gym.create_dataset(self.dataset, size=1, seed=seed, **self.params.config)
            self._cache[seed] = (ds, ds[0])
        return self._cache[seed]

    def make_instance(self, seed: int) -> Instance:
        _, entry = self._entry(seed)
        prompt = f"{entry['question']}\nAnswer: "
        return Instance(seed, prompt, {"answer": str(entry["answer"])})

    def problem_key(self, instance: Instance) -> str:
        """The question's text: two seeds that make the same question are one problem."""

        return instance.prompt

    def verify(self, instance: Instance, response: str) -> float:
        """The dataset's own ``score_answer``. A scorer that raises is not caught here: the
        verifier gate (tasks/verify.py) counts the raise as a verifier failure (``raised``) and
        the agent marks that sample failed, so a broken scorer shows in the stats instead of
        passing as a silent 0 reward."""

        ds, entry = self._entry(instance.seed)
        return float(ds.score_answer(response.strip(), entry))

    def oracle(self, instance: Instance, observations: list[str]) -> str:
        return f"{instance.data['answer']}\n"

    def alphabet(self) -> str:
        return string.printable
