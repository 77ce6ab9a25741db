"""Errors a person can act on: one line per problem, each naming its key path."""

from __future__ import annotations

import difflib
import errno
import os
import types
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from .redact import redact


class SixblanksError(Exception):
    """An error meant for the user: printed without a traceback, exit code ``exit_code``. A
    password in a URI it quotes is masked (:func:`~.redact.redact`): messages reach terminals,
    logs and the runs' status files."""

    exit_code = 1

    def __init__(self, problems: str | Sequence[str]):
        problems = [problems] if isinstance(problems, str) else list(problems)
        self.problems = [redact(str(p)) for p in problems]
        super().__init__("\n".join(self.problems))


class ConfigError(SixblanksError):
    """The experiment file is missing, malformed or invalid (exit code 2)."""

    exit_code = 2


class DiskFull(SixblanksError):
    """A write failed for want of space (or a file-size limit): exit code 1, nothing corrupted."""

    exit_code = 1


_FULL_ERRNOS = (28, 27, 122)  # ENOSPC, EFBIG (a file-size limit), EDQUOT
_FULL_WORDS = ("no space left", "file too large", "filetoolarge", "storagefull", "disk quota")


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (an OSError, or a library's error wrapping one) says the disk is full."""

    if isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS:
        return True
    text = str(exc).lower()
    return any(w in text for w in _FULL_WORDS)


def interrupted_inside(exc: BaseException) -> bool:
    """Whether ``exc`` was caused by a Ctrl-C: a KeyboardInterrupt anywhere in its chain of causes.
    A library that calls back into Python may wrap the KeyboardInterrupt that landed in the
    callback (pydantic's serializers raise a PydanticSerializationError whose cause it is)."""

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def disk_full_message(exc: BaseException, what: str) -> str:
    where = getattr(exc, "filename", None)
    return (
        f"no space left writing {where or what} ({redact(str(exc))[:120]}): free space (or raise "
        "the file-size limit), then run the same command: what was written before is intact, and "
        "runs resume from their last checkpoint"
    )


def path_problem(path: str | Path, exc: OSError, writing: bool = True) -> str:
    """What is wrong with ``path``, in words, after ``exc`` (an OSError): a part of it that is a
    file where a directory is needed; when ``writing`` (making or writing it), also a directory
    not writable by this user, a read-only file system, a place that takes no new entries (/proc,
    /sys); else the system's own words."""

    path = Path(path)
    anc = next((a for a in [path, *path.parents] if os.path.lexists(a)), None)
    if anc is not None and anc != path and not anc.is_dir():
        return f"{anc} is a file, not a directory"
    if anc == path and exc.errno in (errno.EEXIST, errno.ENOTDIR) and not path.is_dir():
        return f"{path} is a file, not a directory"
    if not writing:
        return (exc.strerror or str(exc)).lower()
    if exc.errno == errno.EROFS:
        return f"{anc or path} is on a read-only file system"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"{anc or path} is not writable by this user (permission denied)"
    if exc.errno == errno.ENOENT and anc is not None and anc != path:
        if not os.access(anc, os.W_OK):
            return f"{anc} is not writable by this user"
        return f"{anc} takes no new files or directories (a special or read-only file system)"
    return (exc.strerror or str(exc)).lower()


def describe(exc: BaseException, what: str = "files") -> str:
    """One line for a failed run or trial: a full disk said plainly, a user error as it is."""

    if isinstance(exc, DiskFull):
        return str(exc)
    if disk_full(exc):
        return disk_full_message(exc, what)
    return redact(f"{type(exc).__name__}: {exc}")


def suggest(name: str, valid: Iterable[str]) -> str:
    """'; did you mean 'x'?' when a close match exists, else ''."""

    close = difflib.get_close_matches(str(name), sorted(valid), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def unknown_name(kind: str, name: str, valid: Iterable[str]) -> str:
    valid = sorted(valid)
    return f"unknown {kind} '{name}'{suggest(name, valid)} (valid: {', '.join(valid)})"


def _path(loc: Sequence[Any]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "<root>"


def _resolve_container_loc(model: type[BaseModel], loc: Sequence[Any]) -> type[BaseModel] | None:
    """Like _model_at but steps over dict keys / list indices inside containers."""

    def unwrap(tp: Any) -> list[Any]:
        origin = typing.get_origin(tp)
        if origin in (typing.Union, types.UnionType):
            out: list[Any] = []
            for arg in typing.get_args(tp):
                out += unwrap(arg)
            return out
        if origin is typing.Annotated:
            return unwrap(typing.get_args(tp)[0])
        return [tp]

    tp: Any = model
    i = 0
    items = list(loc[:-1])
    while i < len(items):
        cands = unwrap(tp)
        models = [c for c in cands if isinstance(c, type) and issubclass(c, BaseModel)]
        containers = [c for c in cands if typing.get_origin(c) in (dict, list)]
        if models:
            field = models[0].model_fields.get(str(items[i]))
            if field is None:
                return None
            tp = field.annotation
            i += 1
        elif containers:
            tp = typing.get_args(containers[0])[-1]
            i += 1  # the dict key or list index
        else:
            return None
    cands = unwrap(tp)
    models = [c for c in cands if isinstance(c, type) and issubclass(c, BaseModel)]
    return models[0] if models else None


def _short(value: Any) -> str:
    text = redact(repr(value))  # before it is cut: a cut URI would no longer show its password
    return text if len(text) <= 60 else text[:57] + "..."


def format_validation_error(
    err: ValidationError, model: type[BaseModel] | None = None, prefix: Sequence[Any] = ()
) -> list[str]:
    """One line per pydantic error: ``key.path: message``, with did-you-mean for unknown keys."""

    lines: list[str] = []
    for e in err.errors(include_url=False):
        loc = tuple(prefix) + tuple(e.get("loc", ()))
        etype = e.get("type", "")
        ctx = e.get("ctx") or {}
        got = e.get("input")
        if etype == "extra_forbidden":
            holder = _resolve_container_loc(model, e.get("loc", ())) if model else None
            key = loc[-1] if loc else "?"
            if holder is not None:
                valid = list(holder.model_fields)
                msg = f"unknown key '{key}'{suggest(str(key), valid)} (valid: {', '.join(valid)})"
            else:
                msg = f"unknown key '{key}'"
        elif etype == "missing":
            msg = "required key is missing"
        elif etype == "greater_than":
            msg = f"must be > {ctx.get('gt')} (got {_short(got)})"
        elif etype == "greater_than_equal":
            msg = f"must be >= {ctx.get('ge')} (got {_short(got)})"
        elif etype == "less_than":
            msg = f"must be < {ctx.get('lt')} (got {_short(got)})"
        elif etype == "less_than_equal":
            msg = f"must be <= {ctx.get('le')} (got {_short(got)})"
        elif etype in ("int_type", "int_parsing", "int_from_float"):
            msg = f"must be an integer (got {_short(got)})"
        elif etype in ("float_type", "float_parsing"):
            msg = f"must be a number (got {_short(got)})"
        elif etype in ("bool_type", "bool_parsing"):
            msg = f"must be true or false (got {_short(got)})"
        elif etype in ("string_type",):
            msg = f"must be a string (got {_short(got)})"
        elif etype in ("dict_type", "model_type", "model_attributes_type"):
            msg = f"must be a mapping of keys to values (got {_short(got)})"
        elif etype in ("list_type", "tuple_type"):
            msg = f"must be a list (got {_short(got)})"
        elif etype == "literal_error":
            expected = ctx.get("expected", "")
            msg = f"must be one of {expected} (got {_short(got)})"
            options = [o.strip().strip("'") for o in str(expected).replace(" or ", ",").split(",")]
            msg += suggest(str(got), [o for o in options if o])
        elif etype == "too_short":
            msg = f"must have at least {ctx.get('min_length')} item(s)"
        elif etype == "value_error":
            msg = str(ctx.get("error", e.get("msg", "")))
            # model validators may name their own sub-path as 'a.b: message'
            head, sep, tail = msg.partition(": ")
            if sep and " " not in head and head:
                loc = loc + tuple(head.split("."))
                msg = tail
        else:
            msg = e.get("msg", etype)
            msg = msg[0].lower() + msg[1:] if msg else etype
        lines.append(f"{_path(loc)}: {msg}")
    return lines
