"""`sixblanks` started as a terminal starts it, for the tests that press Ctrl-C (SIGINT to its
process group).

A process started with SIGINT ignored passes that on to everything it starts, and Python then
installs no Ctrl-C handler of its own: a test runner launched in the background by a
non-interactive shell (``make test &``, ``nohup``, some CI runners) starts every command under
test deaf to the SIGINT the test sends, which then runs to its end instead of stopping. A
terminal's shell starts a command with SIGINT at its default; :data:`CLI` puts Python's own
handler back first, whatever the test runner inherited."""

import sys

CLI = (
    "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from sixblanks.harness.cli import main; main()"
)
"""The ``-c`` code of a `sixblanks` command that a test interrupts."""


def command(*args: str) -> list[str]:
    """The argument list of `sixblanks ARGS...` started as :data:`CLI`."""

    return [sys.executable, "-c", CLI, *args]
