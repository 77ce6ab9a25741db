"""The servers an experiment depends on, checked before anything starts.

A cluster shares its results through servers: an MLflow tracking server (``tracking.uri:
http://...``) and a database for the sweep's Optuna study (``sweep.storage: postgresql://...``).
A server that does not answer at start is a clear error naming it, before any warm start or run
(an hour of training that cannot record its study is worse than no start). Results never depend
on the tracking server: runs write their directories and the DuckDB store first, and
``sixblanks sync OUT`` sends to MLflow later what did not reach it."""

from __future__ import annotations

import urllib.error
import urllib.request

from ..errors import SixblanksError

TIMEOUT_S = 5.0


class ServerUnreachable(SixblanksError):
    """A configured server that does not answer."""


def _reason(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def check_tracking(uri: str | None, enabled: bool = True) -> None:
    """An MLflow tracking server (``http(s)://``) must answer its health check; a database URI
    (``postgresql://``, ``mysql://``) must accept a connection. Local files (sqlite, ``file:``)
    need no server."""

    if not enabled or not uri:
        return
    if uri.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=TIMEOUT_S) as r:
                if r.status == 200:
                    return
                reason = f"HTTP {r.status}"
        except urllib.error.HTTPError as exc:
            reason = f"HTTP {exc.code} from /health: is this an MLflow server?"
        except (OSError, ValueError) as exc:
            reason = _reason(getattr(exc, "reason", exc))
        raise ServerUnreachable(
            f"tracking.uri: no MLflow tracking server answers at {uri} ({reason}). Start it "
            "(`mlflow server --backend-store-uri postgresql://... --host ...`), or set "
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
        raise ServerUnreachable(f"{what}: {url!r} is not a database URL ({exc})") from None
    shown = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() == "sqlite":
        return
    connect_args = {"connect_timeout": int(TIMEOUT_S)} if parsed.get_backend_name() in (
        "postgresql", "mysql") else {}  # fmt: skip
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
