"""Where things live on disk: the one owner of every file name of an experiment and of its runs.

    OUT/                        ExperimentDir (default: runs/<experiment name>)
      experiment.json           the resolved config, the warm-start info, the run ids   orchestrator
      fairness.json             the fairness audit                                      orchestrator
      summary.json              one row per run of the last `sixblanks run`             orchestrator
      results.duckdb            the results store                                       store only
      mlflow_sync.json          what MLflow has received                                tracking
      mlflow.db                 the default MLflow tracking store                       tracking
      mlartifacts/              MLflow artifacts                                        tracking
      warm_start/<key>/         the cached warm-start policy of each warm-start key     warmstart
        warm_start.json         its info: key, policy hash, SFT losses, demonstration ledger
      runs/<run_id>/            RunDir: one run (below)                                 runner
      ladder.json               the last ablation ladder                                ladder
      ladder.progress.json      each finished rung of the walk in progress (a killed walk resumes)
      ladder.frozen_batch.pt    rung 2's frozen batch (the arm, the warm start, the prepared batch)
      report/                   the comparison report                                   reports
      sweep/                    SweepDir: an ExperimentDir of its own (the confirmation runs, their
                                store and report) plus
        sweep.json              trials and effort per arm                               sweep
        optuna.journal          the Optuna storage (unless sweep.storage names one)     sweep

    OUT/runs/<run_id>/          RunDir; a run writes only here
      spec.json                 the fully resolved spec (its content hash is the run id)
      status.json               state (pending/running/finished/failed), step, counters, last eval,
                                timings
      events.jsonl              one line per step / evaluation / census record
      ledger.jsonl              every ledger event, append-only (harness/orchestration/ledgerlog.py)
      checkpoint/               model, optimizers, RNG states, ledger, position
                                (harness/checkpoint.py: safetensors + a weights-only state + a
                                checksummed manifest; checkpoint.prev/ the one before)
      result.json               final counters, evaluations, consumption (finished runs only)
      policy/                   the final policy as a model directory transformers loads, with its
                                tokenizer and model card (finished runs only; policy_out.py)

JSON files are written atomically (``write_json``): a reader never sees a torn file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .runspec import RunSpec

EXPERIMENTS_ROOT = "runs"
"""Where ``sixblanks run`` puts an experiment without ``--out``: ``runs/<name>``."""

# experiment output directory
EXPERIMENT_JSON = "experiment.json"
FAIRNESS_JSON = "fairness.json"
SUMMARY_JSON = "summary.json"
RESULTS_DB = "results.duckdb"
MLFLOW_SYNC_JSON = "mlflow_sync.json"
MLFLOW_DB = "mlflow.db"
MLFLOW_ARTIFACTS = "mlartifacts"
WARM_START = "warm_start"
WARM_START_JSON = "warm_start.json"
# the warm-start tokenizer's identity (fairness/audit.py), beside it: a cached warm start is checked
# without loading the policy (or importing transformers) in the orchestrating process
TOKENIZER_IDENTITY_JSON = "tokenizer_identity.json"
# the start evaluations shared by runs with equal evaluation inputs (training/start_eval.py)
START_EVALUATIONS = "start_evaluations"
RUNS = "runs"
LADDER_JSON = "ladder.json"
LADDER_PROGRESS = "ladder.progress.json"
LADDER_FROZEN_BATCH = "ladder.frozen_batch.pt"
REPORT = "report"
SWEEP = "sweep"
SWEEP_JSON = "sweep.json"
OPTUNA_JOURNAL = "optuna.journal"

# run directory
SPEC_JSON = "spec.json"
STATUS_JSON = "status.json"
EVENTS_JSONL = "events.jsonl"
LEDGER_JSONL = "ledger.jsonl"
CHECKPOINT = "checkpoint"
RESULT_JSON = "result.json"
POLICY = "policy"
PLACEMENT_JSON = "placement.json"
SHARED_JSON = "shared.json"


NOT_WRITTEN: Path | None = None
"""In the ranks of a data-parallel run other than rank 0: the run's directory. They compute
everything rank 0 does, and rank 0 alone writes the run's files (status, events, ledger log,
checkpoints, result); files elsewhere (a vLLM engine's export) they write as any process does."""


def writes(path: str | Path) -> bool:
    """Whether this process writes ``path`` (not one of :data:`NOT_WRITTEN`'s files)."""

    if NOT_WRITTEN is None:
        return True
    p = Path(path).resolve()
    return p != NOT_WRITTEN and NOT_WRITTEN not in p.parents


def write_text(path: Path, text: str) -> None:
    """Write ``text`` atomically: a temporary file beside ``path``, then a rename (nothing in a
    rank that does not write the run's files, :data:`NOT_WRITTEN`)."""

    if not writes(path):
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON atomically (indented; non-JSON values as ``str``)."""

    write_text(Path(path), json.dumps(data, indent=2, default=str))


def read_json(path: Path, default: Any = None) -> Any:
    """The JSON in ``path``, or ``default`` when there is no such file."""

    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return default
    return json.loads(text)


class Directory:
    """A directory of the layout, by its path."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"


class RunDir(Directory):
    """One run's directory (``OUT/runs/<run_id>``); its name is the run id."""

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def spec(self) -> Path:
        return self.path / SPEC_JSON

    @property
    def status(self) -> Path:
        return self.path / STATUS_JSON

    @property
    def events(self) -> Path:
        return self.path / EVENTS_JSONL

    @property
    def ledger_log(self) -> Path:
        return self.path / LEDGER_JSONL

    @property
    def checkpoint(self) -> Path:
        return self.path / CHECKPOINT

    @property
    def policy(self) -> Path:
        """The finished run's policy: a model directory (harness/orchestration/policy_out.py)."""
        return self.path / POLICY

    @property
    def placement(self) -> Path:
        """Where a Ray task ran the run and what it held (harness/orchestration/placement.py);
        local runs: none."""
        return self.path / PLACEMENT_JSON

    @property
    def shared(self) -> Path:
        """In a run copied from another claim's finished run (it was not trained here): where it
        came from (harness/studies/findings/shared.py)."""
        return self.path / SHARED_JSON

    @property
    def result(self) -> Path:
        return self.path / RESULT_JSON

    def exists(self) -> bool:
        """Whether a run was started here (its spec is written first)."""

        return self.spec.exists()

    def read_spec(self) -> RunSpec:
        """The run's spec.json, as written when the run was planned."""

        return RunSpec.from_json(self.spec.read_text(encoding="utf-8"))

    def read_status(self) -> dict[str, Any]:
        """status.json; ``{"state": "pending"}`` when the run has not started (or it is
        unreadable)."""

        try:
            return json.loads(self.status.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return {"state": "pending"}

    def read_result(self) -> dict[str, Any]:
        """result.json; ``{}`` until the run has finished."""

        return read_json(self.result, {})

    def read_events(self) -> list[dict[str, Any]]:
        """The records of events.jsonl, up to a torn last line of a killed run (redone on
        resume)."""

        import orjson

        if not self.events.exists():
            return []
        out = []
        lines = self.events.read_bytes().splitlines()
        for i, line in enumerate(lines):
            try:
                out.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                # NaN / Infinity (a metric such as explained variance can be NaN): json reads them
                try:
                    out.append(json.loads(line))
                except ValueError:
                    if i == len(lines) - 1:
                        break  # the torn last line of a killed run
                    raise ValueError(
                        f"{self.events}: line {i + 1} of {len(lines)} is not JSON: {line[:80]!r}"
                    ) from None
        return out


def read_status(run_dir: str | Path) -> dict[str, Any]:
    """The status of the run in ``run_dir`` (see :meth:`RunDir.read_status`)."""

    return RunDir(run_dir).read_status()


class ExperimentDir(Directory):
    """An experiment's output directory (``OUT``)."""

    @classmethod
    def default(cls, name: str) -> ExperimentDir:
        """Where an experiment goes without ``--out``: ``runs/<name>`` under the current
        directory."""

        return cls(Path(EXPERIMENTS_ROOT) / name)

    @property
    def experiment(self) -> Path:
        return self.path / EXPERIMENT_JSON

    @property
    def fairness(self) -> Path:
        return self.path / FAIRNESS_JSON

    @property
    def summary(self) -> Path:
        return self.path / SUMMARY_JSON

    @property
    def results_db(self) -> Path:
        return self.path / RESULTS_DB

    @property
    def mlflow_sync(self) -> Path:
        return self.path / MLFLOW_SYNC_JSON

    @property
    def mlflow_db(self) -> Path:
        return self.path / MLFLOW_DB

    @property
    def mlflow_artifacts(self) -> Path:
        return self.path / MLFLOW_ARTIFACTS

    @property
    def warm_start(self) -> Path:
        """The warm-start cache: one directory per warm-start key."""

        return self.path / WARM_START

    def warm_policy(self, key: str) -> Path:
        """The cached warm-start policy of ``key`` (as ``warmstart.warm_start`` writes it)."""

        return self.warm_start / key

    @property
    def runs(self) -> Path:
        return self.path / RUNS

    def run(self, run_id: str) -> RunDir:
        return RunDir(self.runs / run_id)

    @property
    def ladder(self) -> Path:
        return self.path / LADDER_JSON

    @property
    def ladder_progress(self) -> Path:
        return self.path / LADDER_PROGRESS

    @property
    def ladder_frozen_batch(self) -> Path:
        return self.path / LADDER_FROZEN_BATCH

    @property
    def report(self) -> Path:
        return self.path / REPORT

    @property
    def sweep(self) -> SweepDir:
        return SweepDir(self.path / SWEEP)

    def read_experiment(self) -> dict[str, Any]:
        return json.loads(self.experiment.read_text(encoding="utf-8"))


class SweepDir(ExperimentDir):
    """``OUT/sweep``: the confirmation runs' experiment directory, plus the search's own files."""

    @property
    def sweep_summary(self) -> Path:
        return self.path / SWEEP_JSON

    @property
    def optuna_journal(self) -> Path:
        return self.path / OPTUNA_JOURNAL


def model_dir_of(path: str | Path) -> Path:
    """The model directory ``path`` names: a run directory's saved policy (``RUN/policy``; a run
    that has not finished has none) or a model directory itself (``config.json``). Raises
    ValueError saying what it is not."""

    p = Path(path)
    if (p / SPEC_JSON).is_file():
        policy = RunDir(p).policy
        if not (policy / "config.json").is_file():
            state = RunDir(p).read_status().get("state", "unknown")
            raise ValueError(
                f"'{path}' is a run directory without a saved policy (its state: {state}; a run "
                "saves one in policy/ when it finishes, since sixblanks saves policies at all)"
            )
        return policy
    if (p / "config.json").is_file():
        return p
    raise ValueError(
        f"'{path}' is neither a run directory (spec.json) nor a model directory (config.json)"
    )
