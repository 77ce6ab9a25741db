"""The ``eval`` section: the held-out evaluation, and its optional beam search."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import Section


class EvalBeam(Section):
    """Inference-time beam search at each evaluation (a search-time score, reported apart)."""

    beam: int = Field(2, ge=1, description="Unfinished nodes kept per instance each turn.")
    expand: int = Field(2, ge=2, description="Children sampled from each kept node.")
    temperature: float = Field(
        1.0, gt=0, description="Sampling temperature of the expansions (siblings must differ)."
    )


class EvalConfig(Section):
    every: float | None = Field(
        None,
        gt=0,
        description="Evaluate every N units of the budgeted counter; None: 4 times per run.",
    )
    counter: str | None = Field(
        None, description="Counter 'every' is measured in; None: the first budget counter."
    )
    size: int | None = Field(
        None, gt=0, description="Instances per evaluation; None: each task's eval_size."
    )
    temperature: float = Field(0.0, ge=0, description="0: greedy decoding.")
    samples: int = Field(
        1, ge=1, description="Samples per instance: pass@1 averaged, and pass@k for k = samples."
    )
    beam: EvalBeam | None = Field(
        None,
        description="Also score each evaluation with inference-time beam search over turns (the "
        "verifier picks the leaf): a search-time score with its own compute, reported in a row of "
        "its own, never in the arm table; None: single samples only.",
    )
    split: Literal["test", "validation"] = Field(
        "test",
        description="Held-out split scored: 'test' for reports (the default); the sweep's trials "
        "and the ladder use 'validation', disjoint from test, so selection never sees the "
        "reported instances.",
    )

    @model_validator(mode="after")
    def _samples(self) -> EvalConfig:
        if self.samples > 1 and self.temperature == 0:
            raise ValueError(
                "samples: several samples per instance need eval.temperature > 0 (greedy samples "
                "are identical: pass@k would equal pass@1 at k times the cost)"
            )
        return self
