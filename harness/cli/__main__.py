"""`python -m sixblanks.harness.cli`: the command line."""

from . import console

console()
