"""One way to turn a name in a config into a Python object: :func:`import_object`.

Every user-supplied object path (a task class ``task.name: my_pkg.tasks:Reverse``, a judge
``task.judge.callable``, a dataset verifier ``params.verifier``) and the data classes a checkpoint
names go through it, so every form is accepted everywhere and every failure reads the same.

Ground floor: imports nothing of the project but its errors.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import pkgutil
import sys
from types import ModuleType
from typing import Any

from .errors import suggest


class ImportObjectError(ValueError):
    """A path that names no object. ``problem``: ``"form"`` (not a path), ``"module"`` (no such
    module, or importing it raised) or ``"attribute"`` (the module has no such name)."""

    def __init__(self, path: str, problem: str, message: str):
        self.path, self.problem = path, problem
        super().__init__(f"'{path}': {message}")


def import_object(path: str, what: str = "attribute") -> Any:
    """The object ``path`` names, in either form:

    - ``"package.module:name"``: the module before the colon, then the name after it (a dotted
      name walks attributes: ``"package.module:Class.method"``); the form configs document;
    - ``"package.module.name"``: the longest importable module path, then attributes (the form
      ``pkgutil.resolve_name`` also takes; checkpoints name their data classes so).

    ``what`` says what the caller wants (``"class"``, ``"callable"``), to name it in errors.
    Raises :class:`ImportObjectError`, whose message starts with the path and says what failed:
    the form, a module not found (with a close name among its siblings), a module whose own
    import raised (its error), or a missing name (with a close public name of the module)."""

    if not isinstance(path, str) or not path.strip():
        raise ImportObjectError(str(path), "form", "empty: expected 'module:name'")
    if ":" in path:
        module_name, _, attrs = path.partition(":")
        if not module_name or not attrs or ":" in attrs:
            raise ImportObjectError(path, "form", "expected 'module:name' (one colon)")
        obj: Any = _import(path, module_name)
        owner, sep = module_name, ":"
    else:
        parts = path.split(".")
        if len(parts) < 2 or not all(parts):
            raise ImportObjectError(path, "form", "expected 'module:name' or 'module.name'")
        obj, owner, rest = _import(path, parts[0]), parts[0], parts[1:]
        # down the modules while the next part is one (a submodule, imported where not yet)
        while rest:
            sub, here = f"{owner}.{rest[0]}", getattr(obj, rest[0], None)
            if isinstance(here, ModuleType):
                obj = here
            elif here is None and hasattr(obj, "__path__") and _exists(sub):
                obj = _import(path, sub)
            else:
                break
            owner, rest = sub, rest[1:]
        if not rest:
            return obj
        attrs, sep = ".".join(rest), "."
    names = attrs.split(".")
    for i, name in enumerate(names):
        if not name:
            raise ImportObjectError(path, "form", f"an empty name in '{attrs}'")
        try:
            obj = getattr(obj, name)
        except AttributeError:
            kind = "module " if isinstance(obj, ModuleType) else ""
            public = [n for n in dir(obj) if not n.startswith("_")]
            if hasattr(obj, "__path__"):  # a package: its submodules not imported yet too
                public += [m.name for m in pkgutil.iter_modules(obj.__path__)]
            wanted = what if i == len(names) - 1 else "attribute"
            raise ImportObjectError(
                path,
                "attribute",
                f"{kind}'{owner}' has no {wanted} '{name}'{suggest(name, public)}",
            ) from None
        owner, sep = f"{owner}{sep}{name}", "."
    return obj


def _exists(module: str) -> bool:
    """Whether ``module`` can be found (its parent package is imported already)."""

    if module in sys.modules:
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _import(path: str, module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or module
        if module == missing or module.startswith(missing + "."):  # the module itself is absent
            parent, _, last = missing.rpartition(".")
            if parent:
                hint = suggest(last, _submodules(parent))
            else:  # among every top-level module: only a near miss ('jsn' for 'json')
                near = difflib.get_close_matches(last, _submodules(None), n=1, cutoff=0.8)
                hint = f"; did you mean '{near[0]}'?" if near else ""
                hint += " (is its folder on sys.path, or PYTHONPATH?)"
            raise ImportObjectError(
                path,
                "module",
                f"cannot import module '{module}': no module named '{missing}'{hint}",
            ) from None
        raise _raised(path, module, exc) from None
    except Exception as exc:  # noqa: BLE001 - the module exists but its own import fails
        raise _raised(path, module, exc) from None


def _raised(path: str, module: str, exc: BaseException) -> ImportObjectError:
    return ImportObjectError(
        path,
        "module",
        f"cannot import module '{module}': importing it raised {type(exc).__name__}: {exc}",
    )


def _submodules(package: str | None) -> list[str]:
    """The modules of ``package`` (None: the top-level ones); [] where it cannot be imported."""

    try:
        where = importlib.import_module(package).__path__ if package else None
    except Exception:  # noqa: BLE001 - no suggestion then
        return []
    return [m.name for m in pkgutil.iter_modules(where)]
