"""``reasoning_gym:<dataset>``: any reasoning-gym procedural dataset, scored by its own scorer."""

from __future__ import annotations

import string
from functools import lru_cache
from typing import Any

from pydantic import Field

from .base import Instance, Task, TaskParams


class ReasoningGymParams(TaskParams):
    config: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of the dataset's config."
    )


@lru_cache(maxsize=1)
def dataset_names() -> tuple[str, ...]:
    import reasoning_gym

    return tuple(sorted(reasoning_gym.factory.DATASETS))


class ReasoningGymTask(Task):
    """One reasoning-gym dataset. Each instance is ``create_dataset(name, size=1, seed=seed)[0]``,
    so instances are deterministic in their seed and train/eval seeds never collide."""

    Params = ReasoningGymParams
    has_oracle = True
    params: ReasoningGymParams

    def __init__(self, dataset: str, params: dict[str, Any] | None = None):
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

    def verify(self, instance: Instance, response: str) -> float:
        ds, entry = self._entry(instance.seed)
        # some scorers raise on malformed answers; the gate records a raise as a failed sample,
        # but a malformed answer is simply wrong, so score it 0 here
        try:
            return float(ds.score_answer(response.strip(), entry))
        except Exception:  # noqa: BLE001 - third-party scorer
            return 0.0

    def oracle(self, instance: Instance, observations: list[str]) -> str:
        return f"{instance.data['answer']}\n"

    def alphabet(self) -> str:
        return string.printable
