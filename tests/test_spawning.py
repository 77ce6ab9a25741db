"""The helper processes sixblanks spawns (``harness/ending.py``'s ``EndingSpawnProcess``, through
:data:`~sixblanks.harness.orchestration.spawning.SPAWN` for the MLflow sync beside a run) end with
their exit code, after their atexit handlers, and without the interpreter's teardown, which their
parent's join would otherwise wait for."""

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
