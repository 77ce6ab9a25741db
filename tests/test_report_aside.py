"""The report's score-against-cost figure: its panels, and its drawing in a forked child."""

import os
import signal
import time
import warnings

import numpy as np
import polars as pl
import pytest

from sixblanks.reports import aside
from sixblanks.reports.cost_figure import (
    ArmSeries,
    CostFigure,
    Panel,
    counters,
    draw_cost_figure,
)
from sixblanks.reports.data import COST_AXES

PARENT = os.getpid()


def _spec() -> CostFigure:
    """Two arms, three runs each, against two counters; B's third run stops early (dotted)."""

    rng = np.random.default_rng(0)
    x = np.array([0.0, 100.0, 200.0, 300.0])

    def runs(shift: float) -> list[tuple[np.ndarray, np.ndarray]]:
        out = [(x, shift + rng.uniform(0, 0.2, 4)) for _ in range(3)]
        return out[:2] + [(x[:3], out[2][1][:3])] if shift else out

    def series(scale: float) -> list[ArmSeries]:
        a, b = runs(0.0), runs(0.3)
        return [
            ArmSeries(
                "A",
                (0.1, 0.2, 0.7, 1.0),
                [(x * scale, y) for x, y in a],
                ["t"] * 3,
                (300.0 * scale, 0.1),
            ),
            ArmSeries(
                "B",
                (0.9, 0.5, 0.1, 1.0),
                [(x * scale, y) for x, y in b],
                ["t"] * 3,
                (266.0 * scale, 0.4),
            ),
        ]

    panels = [
        Panel(["launched_tokens"], "launched tokens", series(1.0)),
        Panel(["wall_seconds"], "wall-clock seconds", series(0.01)),
    ]
    return CostFigure(panels, 0.2, "score", "a title")


def test_the_figure_drawn_in_a_forked_child_is_the_one_drawn_here():
    spec = _spec()
    here = draw_cost_figure(spec)
    assert here.startswith(b"\x89PNG")
    beside = aside.Aside(draw_cost_figure, spec)
    assert beside.pid not in (None, PARENT)  # a child of this process drew it
    pid = beside.pid
    assert beside.result() == here  # byte for byte
    with pytest.raises(ChildProcessError):  # reaped: no zombie left behind
        os.waitpid(pid, os.WNOHANG)


def _own_pid() -> int:
    return os.getpid()


def _dies_in_the_child() -> int:
    if os.getpid() != PARENT:
        os.kill(os.getpid(), signal.SIGKILL)
    return 7


def _raises_in_the_child() -> int:
    if os.getpid() != PARENT:
        raise RuntimeError("only in the child")
    return 8


def _always_raises() -> int:
    raise ValueError(f"bad figure data (in {'the child' if os.getpid() != PARENT else 'here'})")


def _warns() -> int:
    warnings.warn("a label was clipped", UserWarning, stacklevel=1)
    return os.getpid()


def test_a_child_that_dies_or_raises_leaves_the_work_to_this_process():
    assert aside.Aside(_own_pid).result() != PARENT  # it ran in the child
    assert aside.Aside(_dies_in_the_child).result() == 7  # killed: computed here instead
    assert aside.Aside(_raises_in_the_child).result() == 8
    with pytest.raises(ValueError, match=r"bad figure data \(in here\)"):  # the error, raised here
        aside.Aside(_always_raises).result()


def test_the_childs_warnings_are_raised_here():
    with pytest.warns(UserWarning, match="a label was clipped"):
        pid = aside.Aside(_warns).result()
    assert pid != PARENT


def test_no_fork_when_asked_or_failing_and_a_child_not_collected_is_killed(monkeypatch):
    monkeypatch.setenv(aside.FORK_ENV, "0")
    here = aside.Aside(_own_pid)
    assert here.pid is None and here.result() == PARENT
    monkeypatch.delenv(aside.FORK_ENV)

    def no_process():
        raise OSError(11, "Resource temporarily unavailable")

    with monkeypatch.context() as m:  # fork failing (a process limit): the work is done here
        m.setattr(aside.os, "fork", no_process)
        failed = aside.Aside(_own_pid)
        assert failed.pid is None and failed.result() == PARENT
    t0 = time.monotonic()
    with aside.Aside(time.sleep, 60) as slow:
        pid = slow.pid
    assert time.monotonic() - t0 < 30
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def test_counters_equal_at_every_evaluation_share_a_panel():
    evals = pl.DataFrame(
        {
            "launched_tokens": [0, 96, 192, 0, 96, 190],
            "accepted_tokens": [0, 96, 192, 0, 96, 190],
            "device_hours": [0.0, 0.1, 0.2, 0.0, 0.1, 0.3],
            "verifier_calls": [0, 16, 32, 0, 16, 32],
            "env_steps": [0, 16, 32, 0, 16, 32],
            "wall_seconds": [0.0] * 6,  # never moved: no panel
        }
    )
    assert counters(evals, COST_AXES) == [
        (["launched_tokens", "accepted_tokens"], "launched tokens = accepted tokens"),
        (["device_hours"], "device-hours (CPU: process CPU time)"),
        (["verifier_calls", "env_steps"], "verifier calls = environment steps"),
    ]
    # one discarded sample in one evaluation: accepted tokens get a panel of their own
    apart = evals.with_columns(pl.Series("accepted_tokens", [0, 96, 191, 0, 96, 190]))
    assert [c for c, _ in counters(apart, COST_AXES)] == [
        ["launched_tokens"],
        ["accepted_tokens"],
        ["device_hours"],
        ["verifier_calls", "env_steps"],
    ]


def _gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs (ended; a zombie nobody reaped counts as ended)."""

    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_a_child_ends_with_its_killed_parent():
    """A command killed outright while its report draws leaves no child drawing behind."""

    import subprocess
    import sys

    code = (
        "import os, signal, sys, time\n"
        "from sixblanks.reports import aside\n"
        "child = aside.Aside(time.sleep, 60)\n"
        "print(child.pid, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    pid = int(done.stdout.split()[0])
    deadline = time.monotonic() + 10
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pid)
