"""The chaos suite's summary.

Each chaos case (``tests/chaos/``, and the sweep's kill and Ctrl-C test) takes the ``chaos``
fixture: it names each fault it injects (:meth:`Case.fault`) and checks what survived through
:meth:`Case.same` (counters that must agree) and :meth:`Case.rows` (rows that must all be there,
once). Every case appends its record to one file per ``pytest`` invocation (xdist workers included);
at the end the controlling process prints the totals: cases run, faults survived, counters compared,
rows lost and rows counted twice (both must be 0).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from .strays import RUN

RECORDS = Path(tempfile.gettempdir()) / f"sixblanks-chaos-{RUN}.jsonl"


class Case:
    """One chaos case's faults and comparisons."""

    def __init__(self, name: str):
        self.name = name
        self.faults: list[str] = []
        self.counters = 0
        self.rows_compared = 0
        self.lost = 0
        self.double = 0

    def fault(self, what: str) -> None:
        """A fault this case injects (a kill, a damaged file, a dead server...)."""

        self.faults.append(what)

    def same(self, got: dict[str, float], want: dict[str, float], what: str = "counters") -> None:
        """Each counter of ``want`` equals ``got``'s (missing = 0); asserts, and counts them."""

        keys = sorted(set(got) | set(want))
        bad = [
            f"{k}: {got.get(k, 0.0)!r} != {want.get(k, 0.0)!r}"
            for k in keys
            if not math.isclose(float(got.get(k, 0.0)), float(want.get(k, 0.0)), abs_tol=1e-6)
        ]
        self.counters += len(keys)
        assert not bad, f"{self.name}: {what} differ: {bad}"

    def rows(self, got: int, want: int, what: str = "rows") -> None:
        """``got`` rows where ``want`` must be: fewer are lost, more are counted twice; asserts."""

        self.rows_compared += want
        self.lost += max(0, want - got)
        self.double += max(0, got - want)
        assert got == want, f"{self.name}: {what}: {got} where {want} must be"

    def record(self, passed: bool) -> None:
        line = json.dumps(
            {
                "case": self.name,
                "passed": passed,
                "faults": self.faults,
                "counters": self.counters,
                "rows": self.rows_compared,
                "lost": self.lost,
                "double": self.double,
            }
        )
        fd = os.open(RECORDS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)


def summary() -> list[str] | None:
    """The summary lines of this invocation's chaos cases (None: none ran)."""

    if not RECORDS.exists():
        return None
    recs: list[dict[str, Any]] = [json.loads(x) for x in RECORDS.read_text().splitlines() if x]
    passed = [r for r in recs if r["passed"]]
    lines = [
        f"chaos suite: {len(recs)} case(s) run, {len(passed)} passed; "
        f"{sum(len(r['faults']) for r in passed)} fault(s) survived; "
        f"{sum(r['counters'] for r in recs)} counter(s) compared; "
        f"{sum(r['rows'] for r in recs)} row(s) checked: "
        f"{sum(r['lost'] for r in recs)} lost, {sum(r['double'] for r in recs)} counted twice"
    ]
    for r in recs:
        if not r["passed"]:
            lines.append(f"  FAILED {r['case']}: faults {r['faults']}")
    return lines


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if hasattr(config, "workerinput"):
        return
    lines = summary()
    if lines is None:
        return
    terminalreporter.section("chaos suite")
    for line in lines:
        terminalreporter.write_line(line)
    RECORDS.unlink(missing_ok=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item.chaos_passed = rep.passed


@pytest.fixture
def chaos(request):
    """The case's record for the chaos summary: faults injected, counters and rows compared."""

    case = Case(request.node.nodeid.split("::", 1)[-1])
    yield case
    case.record(bool(getattr(request.node, "chaos_passed", False)))
