"""The helper processes sixblanks spawns (``harness/ending.py``'s ``EndingSpawnProcess``, through
:data:`~sixblanks.harness.orchestration.spawning.SPAWN` for the MLflow sync beside a run) end with
their exit code, after their atexit handlers, and without the interpreter's teardown, which their
parent's join would otherwise wait for. A run worker that the fork server forks for a command gone
meanwhile ends without a traceback after that command's last line."""

import sys
from pathlib import Path

from sixblanks.harness.orchestration.spawning import SPAWN


class _Teardown:
    """Writes ``teardown`` into its folder when freed: by the interpreter's teardown, as a
    module's global."""

    def __init__(self, folder: str):
        self.folder = folder

    def __del__(self):
        Path(self.folder, "teardown").write_text("ran")


_KEPT = None


def _child(folder: str, code: int) -> None:
    import atexit

    global _KEPT
    Path(folder).mkdir()
    _KEPT = _Teardown(folder)
    atexit.register(lambda: Path(folder, "atexit").write_text("ran"))
    sys.exit(code)


def test_a_spawned_helper_ends_with_its_code_after_its_atexit_handlers_without_the_teardown(
    tmp_path,
):
    for code in (0, 3):
        folder = tmp_path / str(code)
        proc = SPAWN.Process(target=_child, args=(str(folder), code))
        proc.start()
        proc.join(120)
        assert proc.exitcode == code
        assert (folder / "atexit").read_text() == "ran"
        assert not (folder / "teardown").exists()


WORKER_FOR_A_GONE_COMMAND = """
import os, sys, _multiprocessing
from multiprocessing import resource_tracker
from sixblanks.harness.orchestration.spawning import worker_context
import brittle

ctx = worker_context()
lock = ctx.Lock()
# as the command's exit does while a worker is being forked: its semaphore unlinked
_multiprocessing.sem_unlink(lock._semlock.name)
resource_tracker.unregister(lock._semlock.name, "semaphore")
for arg in (lock, brittle.Brittle()):
    p = ctx.Process(target=print, args=(arg,))
    p.start()
    p.join()
    print("exitcode", p.exitcode, flush=True)
os._exit(0)
"""

BRITTLE = """
class Brittle:
    def __reduce__(self):
        return (_fail, ())


def _fail():
    raise FileNotFoundError(2, "a file of its own, missing")
"""


def test_a_worker_whose_command_is_gone_ends_without_a_traceback(tmp_path):
    """A Ctrl-C as the workers start: the command says why it stopped and exits, and a worker the
    fork server forks just then finds the command's semaphores gone. It ends with code 1 and says
    nothing (its traceback came after the command's last line); a worker failing otherwise in its
    start still prints its error."""

    import os
    import subprocess

    (tmp_path / "brittle.py").write_text(BRITTLE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    env.pop("SIXBLANKS_KEEP_WARM", None)
    done = subprocess.run(
        [sys.executable, "-c", WORKER_FOR_A_GONE_COMMAND],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    assert done.stdout.split("\n")[:2] == ["exitcode 1", "exitcode 1"], done.stderr[-3000:]
    # one traceback: the brittle argument's, not the gone semaphore's
    assert done.stderr.count("Traceback (most recent call last)") == 1, done.stderr[-3000:]
    assert "a file of its own, missing" in done.stderr
    assert "synchronize.py" not in done.stderr


def _helper_saw(q) -> None:
    import multiprocessing
    import os

    from sixblanks.harness.training.collectors.worker import trainer_alive

    parent = multiprocessing.parent_process()
    preloaded = "transformers.models.llama.modeling_llama" in sys.modules
    q.put((os.getppid(), parent.pid, trainer_alive(parent.pid), preloaded))


def _start_a_helper() -> tuple:
    """In a run worker: a helper process started as a run starts its concurrent collector; the
    worker's pid and parent's, the helper's exit code and what the helper saw."""

    import os

    from sixblanks.harness.orchestration.spawning import helper_context

    ctx = helper_context()
    q = ctx.Queue()
    p = ctx.Process(target=_helper_saw, args=(q,))
    p.start()
    seen = q.get(timeout=60)
    p.join(30)
    return os.getpid(), os.getppid(), p.exitcode, seen


def test_a_runs_helper_is_forked_from_the_server_that_forked_the_run():
    """A run's concurrent collector is forked from the fork server that forked the run's worker,
    beside it (the server's child, its imports made once), not spawned from the worker (a fresh
    interpreter importing torch and transformers again, about 4 s); it knows the worker as the
    trainer that started it, alive while it runs."""

    from sixblanks.harness.orchestration.local_workers import local_pool

    with local_pool(1) as pool:
        worker, server, code, seen = pool.submit(_start_a_helper).result(timeout=120)
    ppid, trainer, alive, preloaded = seen
    assert code == 0
    assert ppid == server != worker  # the server's child, not the worker's
    assert trainer == worker and alive
    assert preloaded  # transformers' Llama, which nothing the helper runs imports
