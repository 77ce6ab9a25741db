"""An experiment's whole command, as the CLI and the Python API both run it: its configuration
(a file, a mapping or a parsed one), its output directory held and claimed for its definition,
every run, then the report. The CLI adds its tables and messages around these; the API returns the
results."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..config import ExperimentConfig, load_config, validate_mapping
from ..errors import ConfigError
from ..layout import ExperimentDir
from .definition import claim
from .outlock import OutDirLock

Log = Callable[[str], None] | None


def as_config(config: str | Path | dict[str, Any] | ExperimentConfig) -> ExperimentConfig:
    """An experiment from a YAML file's path, a mapping of the same keys, or a parsed one; a bad
    one raises :class:`~sixblanks.harness.errors.ConfigError` naming every problem."""

    if isinstance(config, ExperimentConfig):
        return config
    if isinstance(config, dict):
        return validate_mapping(config)
    if isinstance(config, (str, Path)):
        return load_config(Path(config))
    raise ConfigError(
        [f"an experiment is a YAML file's path, a mapping or an ExperimentConfig (got {config!r})"]
    )


def out_dir_of(cfg: ExperimentConfig, out: str | Path | None) -> Path:
    """``out``, or the experiment's default output directory (runs/<name>)."""

    return Path(out) if out is not None else ExperimentDir.default(cfg.name).path


@contextmanager
def claimed(out: Path, cfg: ExperimentConfig, command: str, add: bool, warn: Log) -> Iterator[None]:
    """Within the block, ``out`` is this process's (the output-directory lock) and holds ``cfg``'s
    definition (a different one is refused unless ``add``). Every entry point that runs anything
    (the command line, the Python API, the ladder, the sweep, findings) comes through here, so the
    pre-flight of the experiment's inputs (data files read and checked, a user verifier called
    once) is made here, before the output directory is touched."""

    from .data_files import check_data_files

    check_data_files(cfg)
    with OutDirLock(out, command, log=warn):
        claim(out, cfg, command, add=add, log=warn)
        yield


def build_report_checked(
    directory: Path,
    baseline: str | None = None,
    resamples: int = 2000,
    compare_with: list[Path] | None = None,
    out_dir: Path | None = None,
) -> Path:
    """The report of ``directory``; with ``compare_with``, the comparison of all of them (written to
    ``out_dir``, default DIRECTORY/compare). A report that cannot be built (no store, an unknown
    arm, a damaged store) raises :class:`ConfigError` (exit code 2) saying what to do."""

    from sixblanks.reports.build import build_report
    from sixblanks.reports.data import ReportError

    try:
        if compare_with:
            from sixblanks.reports.compare import build_comparison

            return build_comparison([directory, *compare_with], out_dir, resamples)
        return build_report(directory, baseline, resamples)
    except ReportError as exc:
        raise ConfigError(str(exc)) from None
    except Exception as exc:
        import duckdb

        if not isinstance(exc, (duckdb.IOException, duckdb.InternalException)):
            raise
        dirs = [directory, *(compare_with or [])]
        raise ConfigError(
            f"a results.duckdb of {', '.join(map(str, dirs))} is damaged ({str(exc)[:160]}): "
            f"`sixblanks ingest DIR` sets it aside and rebuilds it from the run directories"
        ) from None


def run_experiment(
    cfg: ExperimentConfig,
    out: Path,
    *,
    log: Log = None,
    warn: Log = None,
    progress: bool | str = False,
    reuse_finished: bool = False,
    add: bool = False,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    report: bool = True,
) -> tuple[dict[str, Any], Path | None]:
    """Every arm x task x seed of ``cfg`` into ``out`` (finished runs of the same code skipped,
    unfinished ones resumed), then the report and the tracking of the experiment. ``on_result`` sees
    the orchestrator's result before the report is built. Returns (that result, the report's path);
    runs that failed are in ``result["failures"]`` (the caller decides what that means). With
    ``report=False`` the runs are tracked but no report is built (the path is None): for a caller
    that runs the same experiment again with more seeds and reads only the last report, which
    :func:`report_experiment` then builds and tracks."""

    if log:  # the imports and the warm start's demonstrations take seconds before its first step
        log(
            "preparing: checking the inputs, loading torch and transformers, finding the warm start"
        )
    from .orchestrator import Orchestrator

    with claimed(out, cfg, "run", add, warn):
        orch = Orchestrator(cfg, out, log=log, progress=progress, reuse_finished=reuse_finished)
        # MLflow's process starts with the runs, gets them once done and the report once built
        with orch.tracking_beside() as tracking:
            result = orch.run(track=False)
            if on_result is not None:
                on_result(result)
            tracking.send([s.run_id for s in orch.plan.specs], result["fairness"])
            path = build_report_checked(out) if report else None
            if path is not None:
                tracking.artifacts([orch.dir.report])
        result["mlflow"] = tracking.state
    return result, path


def report_experiment(
    cfg: ExperimentConfig, out: Path, result: dict[str, Any], *, warn: Log = None
) -> Path:
    """The report of the experiment :func:`run_experiment` ran into ``out`` with ``report=False``
    (``result`` is what it returned), built now and added to the experiment's MLflow parent run
    (with any of its runs MLflow did not get then), under the output directory's lock."""

    from .orchestrator import Orchestrator

    with claimed(out, cfg, "run", True, warn):
        orch = Orchestrator(cfg, out, log=warn, progress=False)
        with orch.tracking_beside() as tracking:  # MLflow imported while the report is built
            tracking.send([row["run_id"] for row in result["summary"]], result["fairness"])
            path = build_report_checked(out)
            tracking.artifacts([orch.dir.report])
    return path
