"""The work of ``ui``: MLflow's UI started on the experiment's store, its address printed once
it answers, and a port already taken refused."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import SixblanksError
from .app import show


def ui_command(db: Path, port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "mlflow",
        "ui",
        "--backend-store-uri",
        f"sqlite:///{db.resolve()}",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]


def serve(cmd: list[str], url: str, wait: float) -> int:
    """Start the server ``cmd`` and print ``url`` once its ``/health`` answers (MLflow's UI takes
    some 25 s to load, and an address printed at once answered nothing for that long); then wait
    for it to end and return its exit code. A server that exits first, or does not answer within
    ``wait`` seconds, is an error that says so (the latter stopped). Ctrl-C stops it."""

    import subprocess
    import time

    try:  # the server's log to standard error: standard output is the address
        log = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # a stream without a file (captured)
        log = None
    proc = subprocess.Popen(cmd, stdout=log)
    try:
        deadline = time.monotonic() + wait
        while not _answers(f"{url}/health"):
            if proc.poll() is not None:
                raise SixblanksError(
                    f"the MLflow UI exited (code {proc.returncode}) before it answered at {url}; "
                    "its own messages are above"
                )
            if time.monotonic() > deadline:
                raise SixblanksError(
                    f"the MLflow UI did not answer at {url} within {wait:g} s and was stopped "
                    "(--wait gives it longer)"
                )
            time.sleep(0.25)
        show(f"MLflow UI on {url} (Ctrl-C to stop)")  # the answer: said under --quiet too
        return proc.wait()
    finally:
        if proc.poll() is None:  # given up on, or Ctrl-C: nothing left listening behind us
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _answers(url: str) -> bool:
    """Whether ``url`` answers with a success (no proxy: it is this machine's)."""

    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=2) as response:
            return 200 <= response.status < 300
    except (OSError, ValueError):  # refused, reset, timed out, an HTTP error status
        return False


def port_taken(port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0
