"""Errors of the algorithms package (pure python)."""

from __future__ import annotations

import difflib


class UnknownNameError(KeyError):
    """A registry lookup failed; the message lists the valid names (and the closest one)."""

    def __init__(self, kind: str, name: str, valid: list[str]):
        self.kind, self.name, self.valid = kind, name, sorted(valid)
        close = difflib.get_close_matches(str(name), self.valid, n=1, cutoff=0.6)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        self.message = f"unknown {kind} '{name}'{hint} (valid: {', '.join(self.valid)})"
        super().__init__(self.message)

    def __str__(self) -> str:  # KeyError quotes its message otherwise
        return self.message
