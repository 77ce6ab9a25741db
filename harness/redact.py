"""Credentials kept out of everything sixblanks writes or says.

A URI in the configuration may carry user-info (``http://user:password@host:5000``,
``postgresql+psycopg://user:password@host/db``, ``ray://user:password@head:10001``). The
configuration keeps the real value to connect with; every message, stored definition, MLflow
parameter, report and log shows :func:`redact`'s form instead: the password replaced by ``***``,
the user kept (it tells which account was used). User-info without a password is replaced whole:
there it is often a token (``https://TOKEN@host``), not a name.

Imports nothing from the project: the ground floor every part may use.
"""

from __future__ import annotations

import re

MASK = "***"

# scheme://user[:password]@host: the password runs to the last "@" before the host, so that an
# unencoded "@" in it (which SQLAlchemy and many users write) is hidden whole rather than in part;
# the host holds no "@" and ends at a path, query, fragment, space, quote or the end of the text
_USERINFO = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)"
    r"(?P<user>[^:/@\s'\"<>]*)"
    r"(?::(?P<password>[^\s'\"<>]*))?"
    r"@(?=[^@/\s'\"<>?#]*(?:[/?#\s'\"<>]|$))"
)


def _masked(m: re.Match[str]) -> str:
    if m.group("password") is not None:
        return f"{m.group('scheme')}{m.group('user')}:{MASK}@"
    return f"{m.group('scheme')}{MASK}@"


def redact(text: str) -> str:
    """``text`` with the user-info of every URI in it masked: ``scheme://user:***@host...`` where
    a password was given, ``scheme://***@host...`` where user-info alone was. Text without such a
    URI is returned unchanged (a message, a URI, a list of arguments joined: all the same)."""

    if "@" not in text:  # the common case, at no regex's cost
        return text
    return _USERINFO.sub(_masked, text)


def redact_opt(value: str | None) -> str | None:
    """:func:`redact` of an optional configuration value (None stays None)."""

    return None if value is None else redact(value)


_REAL: dict[str, str] = {}
"""Redacted form -> the real value, of every credential-bearing value :func:`known` has seen in
this process (memory only: never written)."""


def known(value: str | None) -> str | None:
    """``value`` as a configuration field receives it: a value with a password is remembered
    under its redacted form, and the redacted form of a value seen before in this process is
    given back as the real one. A configuration dumped (redacted) and validated again in the same
    process (a sweep's confirmation runs are configured so) thus still connects with the real
    credentials; a process that reads the redacted form from a file gets the redacted form, and
    takes the credentials from the environment instead (MLflow's and PostgreSQL's variables)."""

    if value is None:
        return None
    real = _REAL.get(value)
    if real is not None:
        return real
    shown = redact(value)
    if shown != value:
        _REAL[shown] = value
    return value


def is_redacted(value: str | None) -> bool:
    """Whether ``value`` holds user-info this module masked (``user:***@`` or ``***@``)."""

    m = _USERINFO.search(value or "")
    return m is not None and MASK in (m.group("password"), m.group("user"))


def without_userinfo(uri: str) -> tuple[str, str | None, str | None]:
    """(``uri`` without its user-info, the user, the password), the last two None where absent:
    what a client that takes credentials apart from the address (an HTTP Authorization header, an
    environment variable) is given. The user and password are returned as written (still
    percent-encoded where they were)."""

    m = _USERINFO.search(uri)
    if m is None:
        return uri, None, None
    return (
        uri[: m.start()] + m.group("scheme") + uri[m.end() :],
        m.group("user"),
        m.group("password"),
    )
