"""The ``sixblanks`` command line: the application (``app``), its commands by part (``describe``:
validate, schema, explain, recommend; ``experiment``: rollouts, run, report, status, sync, ingest,
ui; ``evaluate``: eval; ``studies``: ladder, sweep; ``translate``: other frameworks'
configurations), :func:`main` and :func:`console` (the ``sixblanks`` program itself).

Errors meant for the user (bad config, unknown names, commands not built yet)
print one line per problem and exit non-zero without a traceback; ``--debug``
shows the traceback.
"""

from __future__ import annotations

import inspect
import os
import sys

import typer

from ..errors import SixblanksError
from . import (  # noqa: F401 - each registers its commands on app
    describe,
    evaluate,
    experiment_runs,
    findings,
    studies,
    translate,
)
from .app import app


def _reflowed(doc: str) -> str:
    """A docstring as help text: each paragraph on one line (the help table wraps it to the
    terminal), paragraphs apart. Rich keeps a docstring's hard line breaks, which break lines
    in the middle of the table's column."""

    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs if p.strip())


for _command in app.registered_commands:
    if _command.help is None and _command.callback is not None and _command.callback.__doc__:
        _command.help = _reflowed(_command.callback.__doc__)


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        code = app(args=args, standalone_mode=False)
        if isinstance(code, int) and code:  # outside standalone mode typer returns an exit code,
            if code == 130:  # typer.Exit's, and 130 for Ctrl-C (KeyboardInterrupt) before the
                sys.stderr.write("interrupted\n")  # executor caught it (the warm start, say)
            sys.exit(code)
    except SixblanksError as exc:
        if debug:
            raise
        for line in exc.problems:  # masked where made (SixblanksError)
            sys.stderr.write(f"error: {line}\n")
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except Exception as exc:  # usage errors and the like
        import click

        # typer vendors its own click (typer._click): its usage errors (an unknown option or
        # command, a missing argument, a bad value) are no click.ClickException, and fell through
        # to the exit code 1 of a failure; a usage error is the caller's to fix, like a bad file
        if isinstance(exc, (click.ClickException, typer.TyperException)):
            exc.show()
            sys.exit(exc.exit_code)  # 2 for every usage error (UsageError and its kinds)
        from ..errors import disk_full, disk_full_message, interrupted_inside, path_problem
        from ..redact import redact

        if interrupted_inside(exc):  # a Ctrl-C a library wrapped in an error of its own
            sys.stderr.write("interrupted\n")
            sys.exit(130)
        if debug:
            raise

        if disk_full(exc):  # the orchestrator's own files (experiment.json, the store, a report)
            sys.stderr.write(f"error: {disk_full_message(exc, 'the output directory')}\n")
            sys.exit(1)
        if isinstance(exc, OSError) and isinstance(exc.filename, (str, os.PathLike)):
            # a file that cannot be read or written: which one and why, as a sentence
            problem = path_problem(exc.filename, exc, writing=False)
            sys.stderr.write(redact(f"error: {exc.filename}: {problem}\n"))
            sys.exit(1)
        sys.stderr.write(
            redact(f"error: {type(exc).__name__}: {exc} (run with --debug for the traceback)\n")
        )
        sys.exit(1)


def console() -> None:
    """The ``sixblanks`` program (and ``python -m sixblanks.harness.cli``): :func:`main`, then the
    process's exit without the interpreter's teardown (:func:`~..ending.end_now`:
    about half a second after a ``run`` or a ``report`` has said everything, spent freeing the
    libraries it loaded), or the ordinary exit where a thread that is no daemon still runs. An
    exception other than an exit propagates as usual (its traceback printed, the ordinary exit)."""

    from ..ending import end_now

    try:
        main()
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:  # sys.exit("message"): Python prints it and exits 1
            sys.stderr.write(f"{exc.code}\n")
            code = 1
    end_now(code)
    sys.exit(code)  # a thread that is no daemon runs: the ordinary exit waits for it
