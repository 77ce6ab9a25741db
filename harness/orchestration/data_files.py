"""The inputs that decide a run beyond its configuration and the project's code: the content of
every data file its task and collectors read (a dataset, a file of preference pairs) and the
source of the user's modules it calls (a task class, a verifier, a judge), with every module those
import from the user's tree, at any depth.

They are checked before anything runs (:func:`check_data_files`, called by every entry point),
hashed into the run id and the warm-start key (:func:`task_inputs`, :func:`arm_inputs`) and
compared across arms by the fairness audit: an edit makes the affected runs afresh instead of
passing old results off as current.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..config import ExperimentConfig, TaskConfig


def pairs_files(cfg: ExperimentConfig) -> dict[str, str]:
    """arm -> the file of preference pairs it reads (arms that read none are absent)."""

    out = {}
    for arm in cfg.arms:
        path = cfg.resolved_blanks(arm).data.pairs.file
        if path is not None:
            out[arm] = path
    return out


def check_data_files(cfg: ExperimentConfig) -> None:
    """The pre-flight every entry point makes before anything runs: each arm's file of pairs read
    and checked, and each task made (its data file read) and asked to check itself on a real
    instance (a user verifier called once on a training row). Raises a ConfigError listing every
    problem, each naming its key (and the file, row and column where a file is at fault)."""

    from ..errors import ConfigError

    problems = []
    files = pairs_files(cfg)
    if files:  # the reader lives with the training code (torch): imported only where it reads
        from ..training.collectors.pair_file import pairs_file_problems, read_pairs
    for arm, path in files.items():
        found = [f"arms.{arm}: {p}" for p in pairs_file_problems(path)]
        heldout = cfg.resolved_blanks(arm).data.pairs.heldout
        if not found and heldout >= (n := len(read_pairs(path))):
            found.append(
                f"arms.{arm}.blanks.data.pairs.heldout: {heldout} held out of the {n} pair(s) of "
                f"'{path}' leaves none to train on"
            )
        problems += found
    for key, task_cfg in task_keys(cfg):
        problems += [f"{key}.{p}" for p in task_problems(task_cfg)]
    if problems:
        raise ConfigError("\n".join(problems))


def task_keys(cfg: ExperimentConfig) -> list[tuple[str, TaskConfig]]:
    """(key path, task) of each task as the file names it: ``task`` or ``tasks[i]``."""

    if cfg.tasks is None:
        return []
    # the file's 'task' becomes tasks[0] as it is parsed; 'tasks' is set only by the file then
    if len(cfg.tasks) == 1 and (
        "task" in cfg.model_fields_set or "tasks" not in cfg.model_fields_set
    ):
        return [("task", cfg.tasks[0])]
    return [(f"tasks[{i}]", t) for i, t in enumerate(cfg.tasks)]


def task_problems(task_cfg: TaskConfig) -> list[str]:
    """What stops a task from running, each starting with its key below the task (``params...``);
    [] when it makes itself and passes its own pre-flight (:meth:`Task.preflight`)."""

    from ..tasks import make_task

    if task_cfg.name.startswith("__main__:"):
        return [
            f"name: '{task_cfg.name}' is defined in the script that runs the experiment, which the "
            "runs' worker processes do not import: put the task in a module of its own"
        ]
    try:
        task = make_task(task_cfg.name, task_cfg.params)
    except Exception as exc:  # noqa: BLE001 - the configuration validator has named most of these
        return [f"name: task '{task_cfg.name}' cannot be made: {exc}"]
    return list(task.preflight())


# --------------------------------------------------------------------------- identity


def file_hash(path: str | Path, key: str = "data.pairs.file") -> str:
    """The sha256 (16 hex) of a file's bytes, or of a directory's files (each by its relative name
    and content, symbolic links followed): a run id's record of the data it trains on. ``key``
    names the setting in the error raised where it cannot be read."""

    from ..errors import ConfigError

    p = Path(path)
    try:
        if p.is_dir():
            h = hashlib.sha256()
            for f in _files_under(p):
                h.update(f"{f.relative_to(p).as_posix()}\0".encode())
                h.update(bytes.fromhex(_file_digest(f)))
            return h.hexdigest()[:16]
        return _file_digest(p)[:16]
    except OSError as exc:
        raise ConfigError(f"{key}: '{path}' cannot be read: {exc.strerror}") from None


def _files_under(root: Path) -> list[Path]:
    # Python's bytecode caches are not data: a directory holding modules that get imported gains
    # them (or loses them) with no change of its own, and must keep its hash
    out = []
    for d, dirs, names in os.walk(root, followlinks=True):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        out += [Path(d) / n for n in names if (Path(d) / n).is_file()]
    return sorted(out)


_DIGESTS: dict[tuple[str, int, int, int], str] = {}


def _file_digest(path: Path) -> str:
    """The sha256 of a file, read in chunks, kept for this process while the file's size,
    modification time and inode are unchanged: a command hashes each data file several times
    (the pre-flight, the run ids, the warm-start key, each run's check), a large one once."""

    st = path.stat()
    ident = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    if ident not in _DIGESTS:
        with path.open("rb") as fh:
            _DIGESTS[ident] = hashlib.file_digest(fh, "sha256").hexdigest()
    return _DIGESTS[ident]


def _project_roots() -> tuple[Path, ...]:
    from ..version import source_roots

    return tuple(r.resolve() for r in source_roots())


@lru_cache(maxsize=1)
def _library_dirs() -> tuple[Path, ...]:
    paths = sysconfig.get_paths()
    found = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    return tuple(Path(p).resolve() for p in found)


def _locate(name: str) -> tuple[Path | None, list[str] | None]:
    """(source file, package search path) of module ``name``, found without importing anything:
    from ``sys.modules`` where it is loaded, else by the path finder along ``sys.path`` or its
    parent package's directories (a namespace package has no file, only a search path)."""

    mod = sys.modules.get(name)
    if mod is not None:
        origin = getattr(mod, "__file__", None)
        path = getattr(mod, "__path__", None)
        return (Path(origin) if origin else None), (list(path) if path is not None else None)
    parent, _, leaf = name.rpartition(".")
    search = None
    if parent:
        search = _locate(parent)[1]
        if not search:
            return None, None
    spec = importlib.machinery.PathFinder.find_spec(leaf if parent else name, search)
    if spec is None:
        return None, None
    origin = Path(spec.origin) if spec.has_location and spec.origin else None
    return origin, spec.submodule_search_locations


def _user_file(name: str) -> Path | None:
    """The source file of module ``name`` where it is the user's own (not the standard library, an
    installed library, which is versioned, or the project, whose code is in the code fingerprint);
    None otherwise or where it cannot be found. Nothing is imported: a verifier's lazy import of a
    library that is slow or fails to import costs nothing here."""

    top = name.split(".")[0]
    if top in sys.stdlib_module_names or top == "sixblanks":
        return None
    try:
        origin, _ = _locate(name)
    except Exception:  # noqa: BLE001 - a finder that fails leaves the module out, never the plan
        return None
    if origin is None or origin.suffix != ".py":
        return None
    path = origin.resolve()
    parts = path.parts
    if "site-packages" in parts or "dist-packages" in parts:
        return None
    if any(path.is_relative_to(r) for r in (*_library_dirs(), *_project_roots())):
        return None
    return path


def _imported_names(source: str, module: str, is_package: bool) -> list[str]:
    """The modules a source file may import, by absolute name: ``import a.b`` gives a and a.b,
    ``from a import b`` gives a and a.b (b may be a module), relative imports resolved against
    ``module``'s package. Imports inside functions count too (a verifier's lazy import)."""

    package = module if is_package else module.rpartition(".")[0]
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                names += [".".join(parts[: i + 1]) for i in range(len(parts))]
        elif isinstance(node, ast.ImportFrom):
            base = ("." * node.level) + (node.module or "")
            try:
                absolute = importlib.util.resolve_name(base, package) if node.level else base
            except (ImportError, ValueError):
                continue
            parts = absolute.split(".")
            names += [".".join(parts[: i + 1]) for i in range(len(parts))]
            names += [f"{absolute}.{a.name}" for a in node.names if a.name != "*"]
    return names


def user_modules(roots: Iterable[str]) -> dict[str, str]:
    """Module name -> sha256 (16 hex) of its source file, for every module of the user's tree that
    ``roots`` are or import, transitively (a helper of a helper of a verifier included)."""

    out: dict[str, str] = {}
    queue = list(roots)
    seen: set[str] = set()
    while queue:
        name = queue.pop()
        if name in seen:
            continue
        seen.add(name)
        path = _user_file(name)
        if path is None:
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue  # gone since it was found: its importer's hash still records the import
        out[name] = hashlib.sha256(data).hexdigest()[:16]
        try:
            queue += _imported_names(data.decode("utf-8"), name, path.name == "__init__.py")
        except (SyntaxError, UnicodeDecodeError):
            continue  # hashed; what it imports cannot be read from it
    return dict(sorted(out.items()))


def _callable_modules(task: Any, task_cfg: TaskConfig) -> list[str]:
    """The modules a task's behaviour is defined in: its class and base classes, the user modules
    it calls (a verifier ``module:function``, named as configured: a wrapped function's
    ``__module__`` may be another's), and a judge callable's."""

    names = [k.__module__ for k in type(task).__mro__ if k.__module__ != "builtins"]
    names += list(task.called_modules())
    judge = task_cfg.judge
    if judge is not None and judge.kind == "callable" and judge.callable:
        names.append(judge.callable.split(":", 1)[0])
    return [n for n in names if n]


def task_inputs(task_cfg: TaskConfig) -> dict[str, Any]:
    """What decides a task beyond its configuration and the project's code: ``files`` (path ->
    content hash of each data file it reads) and ``modules`` (user module -> source hash, see
    :func:`user_modules`); each only where there is one (a built-in task without data: {})."""

    from ..tasks import make_task

    task = make_task(task_cfg.name, task_cfg.params)
    out: dict[str, Any] = {}
    files = {str(p): file_hash(p, f"task {task_cfg.name}: a data file") for p in task.input_files()}
    if files:
        out["files"] = files
    modules = user_modules(_callable_modules(task, task_cfg))
    if modules:
        out["modules"] = modules
    return out


def arm_inputs(cfg: ExperimentConfig, arm: str) -> dict[str, Any]:
    """What decides an arm beyond its configuration: the content hash of the file of pairs it
    reads ({} where it reads none)."""

    path = cfg.resolved_blanks(arm).data.pairs.file
    key = f"arms.{arm}.blanks.data.pairs.file"
    return {} if path is None else {"files": {path: file_hash(path, key)}}


DATA_FILE = "<data file: by content>"


def without_locations(settings: dict[str, Any], inputs: dict[str, Any]) -> tuple[dict, dict]:
    """``settings`` (a task's parameters, a data blank's pairs) and ``inputs`` (:func:`task_inputs`)
    as they enter an identity: each data file by its content alone, never by where it lies (a
    setting naming one of ``inputs``' files becomes a placeholder, the files their sorted hashes),
    so the same experiment in a moved or cloned checkout keeps its run ids and warm start."""

    files = (inputs or {}).get("files") or {}
    if not files:
        return settings, inputs
    kept = {k: (DATA_FILE if isinstance(v, str) and v in files else v) for k, v in settings.items()}
    return kept, {**inputs, "files": sorted(files.values())}


def changed_inputs(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two runs' inputs (each as :func:`task_inputs` gives them, merged), in
    words: 'data file X', 'module M' (added, removed or edited)."""

    out = []
    for kind, word in (("files", "data file"), ("modules", "module")):
        a, b = old.get(kind) or {}, new.get(kind) or {}
        out += [f"{word} {k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return out
