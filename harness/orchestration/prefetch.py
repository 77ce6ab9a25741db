"""Imports made in a background thread while the runs train, for the work that follows them.

The command's own process waits while its workers train; what it does after the last step (the
fairness audit, the store, the report and its plots) imports DuckDB, Polars, pandas, SciPy's
statistics and Matplotlib, about 3.5 s in a fresh interpreter. Made meanwhile, they are off the
path between a run's last step and the command's exit. The main thread imports nothing of these
until the thread is joined (two threads importing the same packages at once can meet in the import
system's deadlock check), and a module that fails to import here is imported again, and fails
with its own error, where it is used.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

AFTER_RUNS = (
    "duckdb",
    "polars",
    "polars._utils.parquet",  # the report's scores.parquet
    "pyarrow",
    "pyarrow.compute",
    "pyarrow.vendored.version",
    # DuckDB imports pandas the first time an Arrow table is registered (the store's inserts), to
    # check whether it is a data frame: half a second, paid after the runs unless made here
    "pandas",
    "pyarrow.pandas_compat",
    "sixblanks.harness.store.database",
    "sixblanks.harness.fairness.audit",
    "sixblanks.reports.build",
    "sixblanks.reports.plots",
    "sixblanks.reports.curves",
    "sixblanks.reports.cost_figure",
    "sixblanks.reports.aside",
    "matplotlib.pyplot",
    "matplotlib.backends.backend_agg",
)
"""What the audit, the store and the report import after the runs (``tests/test_reports.py``
checks that they import no more of these packages)."""


def _import_all(modules: Sequence[str]) -> None:
    for name in modules:
        try:
            if name == "matplotlib.pyplot":  # as the report's plots choose it, before pyplot
                import matplotlib

                matplotlib.use("Agg")
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - imported again where used, failing with its own error
            continue


@contextmanager
def imported_meanwhile(modules: Sequence[str] = AFTER_RUNS) -> Iterator[None]:
    """``modules`` imported in a background thread while the block runs; joined when it ends."""

    thread = threading.Thread(target=_import_all, args=(modules,), daemon=True, name="prefetch")
    thread.start()
    try:
        yield
    finally:
        thread.join()
