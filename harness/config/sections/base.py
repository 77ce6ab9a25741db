"""What every section shares: the base model (unknown keys refused, defaults validated) and a
budget's type."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

PositiveFloat = Annotated[float, Field(gt=0)]
Budget = dict[str, PositiveFloat]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)
