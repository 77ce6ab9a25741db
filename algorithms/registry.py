"""Registries of the blanks' named variants: each name, its function, and the spec fields it reads.

Every blank with named variants has one registry (``ESTIMATORS``, ``RATIOS``, ``TRUST_REGIONS``,
``NORMALIZATIONS``, ``KL_ESTIMATORS``, ``OBJECTIVES``). A variant declares:

- ``inputs``: the tensors its function takes, by name; the caller passes exactly these.
- ``reads``: the spec fields its function takes, as dotted paths (``weight.eps_low``). The
  function's keyword is the path's last part (``eps_low``); the caller passes exactly these.
- ``applies``: further spec fields that apply when the variant is chosen but that the code running
  it reads (the critic trainer, the data loop), or that choose further variants.

``add`` checks the declaration against the function's signature (no ``**kwargs``, every parameter
declared, nothing declared that the function does not take), so a renamed argument fails at
import instead of falling back to a default. ``reads + applies`` is what ``sixblanks explain``
shows for the variant (:func:`sixblanks.algorithms.fields.applicable_fields`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import UnknownNameError


def keyword(path: str) -> str:
    """The keyword a function takes a spec field under: the dotted path's last part."""

    return path.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class Variant:
    """One named variant of a blank. Calling it calls ``fn``."""

    name: str
    fn: Callable[..., Any]
    inputs: tuple[str, ...] | None = ()
    """Tensors ``fn`` takes, by name. None: not checked, the caller binds ``fn``'s arguments."""
    reads: tuple[str, ...] = ()
    """Spec fields ``fn`` takes, as dotted paths; ``fn``'s keyword is the last part."""
    applies: tuple[str, ...] = ()
    """Spec fields that apply with this variant but are read by the code that runs it."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    @property
    def fields(self) -> tuple[str, ...]:
        """Every spec field that applies when this variant is chosen."""

        return self.reads + self.applies

    def call(self, inputs: Mapping[str, Any], fields: Mapping[str, Any]) -> Any:
        """``fn`` on exactly its declared inputs (from ``inputs``, by name) and declared fields
        (from ``fields``, a flat ``{dotted.path: value}`` mapping such as ``flatten(blanks)``)."""

        if self.inputs is None:
            raise TypeError(f"variant '{self.name}' declares no inputs; call its fn directly")
        kwargs = {name: inputs[name] for name in self.inputs}
        kwargs.update({keyword(path): fields[path] for path in self.reads})
        return self.fn(**kwargs)


def check_signature(kind: str, variant: Variant) -> None:
    """Raise TypeError unless ``variant.fn`` takes exactly its declared inputs and fields."""

    if variant.inputs is None:
        return
    params = inspect.signature(variant.fn).parameters
    where = f"{kind} '{variant.name}' ({variant.fn.__name__})"
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params.values()):
        raise TypeError(f"{where}: declare every argument, no *args/**kwargs")
    declared = [*variant.inputs, *(keyword(path) for path in variant.reads)]
    if len(set(declared)) != len(declared) or set(declared) != set(params):
        raise TypeError(
            f"{where} takes {list(params)} but declares inputs {list(variant.inputs)} "
            f"and reads {list(variant.reads)}"
        )


class Registry(Mapping[str, Variant]):
    """Name -> :class:`Variant`. An unknown name raises :class:`UnknownNameError` (a KeyError)
    listing the valid names, with the closest one as a did-you-mean."""

    def __init__(self, kind: str, inputs: tuple[str, ...] | None = None):
        self.kind = kind
        self.inputs = inputs
        """Default inputs of the variants (their functions share one calling convention)."""
        self._variants: dict[str, Variant] = {}

    def add(self, variant: Variant) -> Variant:
        if variant.name in self._variants:
            raise ValueError(f"{self.kind} '{variant.name}' is already registered")
        check_signature(self.kind, variant)
        self._variants[variant.name] = variant
        return variant

    def register(
        self,
        name: str,
        *,
        inputs: tuple[str, ...] | None = None,
        reads: tuple[str, ...] = (),
        applies: tuple[str, ...] = (),
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: register ``fn`` as variant ``name`` (``inputs`` default to the registry's)."""

        def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.add(
                Variant(name, fn, inputs if inputs is not None else self.inputs, reads, applies)
            )
            return fn

        return decorator

    def __getitem__(self, name: str) -> Variant:
        try:
            return self._variants[name]
        except (KeyError, TypeError):
            raise UnknownNameError(self.kind, name, list(self._variants)) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._variants)

    def __len__(self) -> int:
        return len(self._variants)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._variants)})"
