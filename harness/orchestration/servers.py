"""The servers an experiment depends on, checked before anything starts.

A cluster shares its results through servers: an MLflow tracking server (``tracking.uri:
http://...``) and a database for the sweep's Optuna study (``sweep.storage: postgresql://...``).
A server that does not answer at start is a clear error naming it, before any warm start or run
(an hour of training that cannot record its study is worse than no start). Results never depend
on the tracking server: runs write their directories and the DuckDB store first, and
``sixblanks sync OUT`` sends to MLflow later what did not reach it."""

from __future__ import annotations

import base64
import os
import socket
import urllib.error
import urllib.parse
import urllib.request

from ..errors import SixblanksError
from ..redact import redact, without_userinfo

TIMEOUT_S = 5.0


class ServerUnreachable(SixblanksError):
    """A configured server that does not answer."""


def _reason(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return redact(text[0]) if text else type(exc).__name__


def _why(exc: BaseException, host: str) -> str:
    """What happened, in words, to a connection to ``host`` (host:port) that failed with
    ``exc``: refused, a name that does not resolve, no answer in time, or the error's own words."""

    if isinstance(exc, ConnectionRefusedError):
        return f"Connection refused: nothing listens at {host}"
    if isinstance(exc, socket.gaierror):
        name = urllib.parse.urlsplit("//" + host).hostname or host
        return f"Host unknown: {name} does not resolve to an address"
    if isinstance(exc, TimeoutError):  # socket.timeout is TimeoutError
        return f"No answer from {host} within {TIMEOUT_S:g} s"
    return _reason(exc)


def _health_request(uri: str) -> urllib.request.Request:
    """The GET of the server's /health: user-info in the URI is sent as a Basic
    Authorization header, as MLflow's client sends it (urllib would take ``user:password@host``
    for a host name), else MLflow's own credential variables where set."""

    bare, user, password = without_userinfo(uri)
    if user is None:
        user = os.environ.get("MLFLOW_TRACKING_USERNAME")
        password = os.environ.get("MLFLOW_TRACKING_PASSWORD")
    else:
        user, password = urllib.parse.unquote(user), urllib.parse.unquote(password or "")
    req = urllib.request.Request(bare.rstrip("/") + "/health")
    if user is not None:
        token = base64.b64encode(f"{user}:{password or ''}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    return req


def check_tracking(uri: str | None, enabled: bool = True) -> None:
    """An MLflow tracking server (``http(s)://``) must answer its health check; a database URI
    (``postgresql://``, ``mysql://``) must accept a connection. Local files (sqlite, ``file:``)
    need no server. Messages show the URI with its password masked."""

    if not enabled or not uri:
        return
    if uri.startswith(("http://", "https://")):
        host = urllib.parse.urlsplit(without_userinfo(uri)[0]).netloc
        try:
            with urllib.request.urlopen(_health_request(uri), timeout=TIMEOUT_S) as r:
                if r.status == 200:
                    return
                reason = f"HTTP {r.status}"
        except urllib.error.HTTPError as exc:
            reason = f"HTTP {exc.code} from /health: is this an MLflow server?"
            if exc.code in (401, 403):
                reason = (
                    f"HTTP {exc.code} from /health: the server refuses these credentials (set "
                    "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD)"
                )
        except (OSError, ValueError) as exc:
            reason = _why(getattr(exc, "reason", exc), host)
        raise ServerUnreachable(
            f"tracking.uri: no MLflow tracking server answers at {redact(uri)} ({reason}). Start "
            "it (`mlflow server --backend-store-uri postgresql://... --host ...`), or set "
            "tracking.mlflow: false; results are kept on disk either way, and `sixblanks sync OUT` "
            "sends them once a server answers."
        )
    if "://" in uri and not uri.startswith(("sqlite:", "file:")):
        check_database(uri, "tracking.uri")


def check_database(url: str, what: str) -> None:
    """Connect once to the database at ``url`` (SQLAlchemy URL); raise :class:`ServerUnreachable`
    naming ``what`` (the config key), the URL (password hidden) and why."""

    import sqlalchemy
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ServerUnreachable(
            f"{what}: {redact(url)!r} is not a database URL ({redact(str(exc))})"
        ) from None
    shown = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() == "sqlite":
        return
    connect_args = (
        {"connect_timeout": int(TIMEOUT_S)}
        if parsed.get_backend_name() in ("postgresql", "mysql")
        else {}
    )
    try:
        engine = sqlalchemy.create_engine(parsed, connect_args=connect_args)
    except ModuleNotFoundError as exc:
        raise ServerUnreachable(
            f"{what}: {shown}: its database driver '{exc.name}' is not installed (for PostgreSQL: "
            "pip install -e '.[cluster]', which brings psycopg2)"
        ) from None
    try:
        with engine.connect():
            pass
    except SQLAlchemyError as exc:
        raise ServerUnreachable(
            f"{what}: cannot connect to {shown} ({_reason(exc)}). Start the database server, or "
            "check the URL."
        ) from None
    finally:
        engine.dispose()
