"""Imported by the local workers' fork server alone (:func:`.spawning.worker_context`), before it
forks any worker: the imports every run needs, made once, and Ctrl-C ignored (from the start, so
also during the imports), so that a worker ignores it from its birth (the server hands its forked
children the signal handlers it had once its imports were made). Ctrl-C reaches the whole process
group; the orchestrator alone decides what it means, and asks a worker to stop its run with
SIGTERM. An import that fails here is left to the worker, which makes it again where it is used
and fails with its own error: the server itself must not die of it."""

import atexit
import importlib
import os
import signal
import sys
import traceback

signal.signal(signal.SIGINT, signal.SIG_IGN)  # from the start: Ctrl-C during the imports too
# The server ends once its command is gone (an exit, never a crash, whatever it held). Its
# interpreter's teardown would free torch and transformers first, 1-1.5 s during which it still
# holds the command's standard output and error: a caller reading them through a pipe (a shell
# pipeline, `subprocess.run(capture_output=True)`, a CI log) would wait that long after the
# command's own exit. Its workers never run it: a forked child ends through os._exit.
atexit.register(os._exit, 0)
_START = dict(os.environ)


def _asker_gone(kind: type, tb) -> bool:
    """Whether a worker's start failed because the command that asked for it is gone: the
    command's semaphores (its pool's queue locks), named in the worker's start-up data, were
    unlinked by its exit before this freshly forked worker opened them (a Ctrl-C as its workers
    started, on a loaded machine)."""

    frames = [f.f_code for f, _ in traceback.walk_tb(tb)]
    return (
        issubclass(kind, FileNotFoundError)
        and bool(frames)
        and frames[-1].co_name == "__setstate__"
        and frames[-1].co_filename.endswith(os.path.join("multiprocessing", "synchronize.py"))
    )


def _quiet_when_the_asker_is_gone(kind: type, value: BaseException, tb) -> None:
    """A forked worker's error hook: nothing said where the command that asked for the worker is
    gone (it said why it stopped; a traceback after its last line would be noise in its terminal
    and its log), the error as ever otherwise. The worker ends with code 1 either way."""

    if not _asker_gone(kind, tb):
        sys.__excepthook__(kind, value, tb)


sys.excepthook = _quiet_when_the_asker_is_gone  # the server forks its workers with it

WORKER_IMPORTS = (
    "torch",
    "torch.utils.serialization",
    "transformers.models.auto.modeling_auto",
    "transformers.models.auto.tokenization_auto",
    "transformers.models.llama.modeling_llama",
    "sixblanks.harness.config",
    "sixblanks.harness.rollout.backends",
    "sixblanks.harness.training",
    "sixblanks.harness.orchestration.ledgerlog",
    "sixblanks.harness.orchestration.runner",
    "sixblanks.harness.orchestration.local_workers",
    # the built-in tasks, which a run's task lookup imports at once
    "sixblanks.harness.tasks.builtin",
    "sixblanks.harness.tasks.dataset",
    "sixblanks.harness.tasks.hierarchical",
    "sixblanks.harness.tasks.judge",
    "sixblanks.harness.tasks.longarith",
    "sixblanks.harness.tasks.rgym",
    "sixblanks.harness.tasks.scratchpad",
    "sixblanks.harness.tasks.selfplay",
)
"""What every run needs (about 4.5 s in a fresh interpreter)."""


def _first_load() -> None:
    """What a worker's first model load would otherwise build: transformers' table of checkpoint
    conversions (about a thousand regular expressions compiled, 0.27 s, kept in a module global
    after the first load; ``get_checkpoint_conversion_mapping`` fills it)."""

    from transformers import conversion_mapping

    conversion_mapping.get_checkpoint_conversion_mapping("llama")


try:
    for _name in WORKER_IMPORTS:
        importlib.import_module(_name)
    _first_load()
except Exception:  # noqa: BLE001 - the worker makes it again where used
    pass

SET_BY_IMPORTS = {k: v for k, v in os.environ.items() if _START.get(k) != v}
"""What the imports set in the environment (``harness/models.py``'s TOKENIZERS_PARALLELISM): a
worker keeps it under its pool's environment (:func:`.local_workers.exit_with_parent`)."""
