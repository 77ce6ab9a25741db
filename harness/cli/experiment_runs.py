"""Commands of an experiment's runs and results: ``rollouts`` (episodes and the contract checks),
``run``, ``report``, ``status``, ``sync``, ``ingest`` and ``ui``. The work of ``rollouts`` is in
``episodes``, of ``ui`` in ``mlflow_ui``."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from ..errors import SixblanksError
from ..layout import ExperimentDir, read_json
from ..orchestration.outlock import OutDirLock
from .app import (
    STATE,
    AddOpt,
    ConfigArg,
    JsonOpt,
    OutOpt,
    app,
    dump_json,
    err,
    experiment_dir,
    human,
    plan_table,
    plural,
    say,
    show,
    warn,
)

# the commands themselves stay here, registered in this order: the help lists them as registered
from .episodes import (
    add_task,
    episode_policy,
    episode_record,
    print_episodes,
    training_seeds,
)
from .mlflow_ui import port_taken, serve, ui_command

# --------------------------------------------------------------------------- rollouts


@app.command()
def rollouts(
    config: ConfigArg = Path("experiments.yaml"),
    task: Annotated[
        str | None, typer.Option("--task", help="Task name (default: the first task).")
    ] = None,
    n: Annotated[int, typer.Option("--n", min=1, help="Task instances to sample.")] = 4,
    group: Annotated[
        int | None,
        typer.Option("--group", min=1, help="Samples per instance (default: rollout.group_size)."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Sampling seed.")] = 0,
    warm: Annotated[
        bool,
        typer.Option(
            "--warm-start/--no-warm-start",
            help="Use the warm-start policy (built and cached if missing).",
        ),
    ] = True,
    tools: Annotated[
        bool,
        typer.Option(
            "--tools/--no-tools",
            help="Offer the experiment's code tool (its tools: section, where it has one), as an "
            "arm offered it plays the task.",
        ),
    ] = True,
    out_dir: OutOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Sample episodes with the configured policy, show them, and run the contract checks (exit 1
    if one fails)."""

    from ..config import load_config

    cfg = load_config(config)
    chosen = add_task(cfg, task)
    quiet = STATE["quiet"] or as_json
    batch, contract, tok = _sample_episodes(
        cfg, chosen, warm, tools, out_dir, n, group, seed, quiet
    )
    if as_json:
        episodes = [episode_record(batch, b, tok) for b in range(batch.size)]
        dump_json({"task": chosen, "episodes": episodes, "contract": contract.to_dict()})
    else:
        print_episodes(batch, tok, contract)
    if not contract.passed:
        raise typer.Exit(1)


def _sample_episodes(cfg, chosen: str, warm, tools, out_dir, n, group, seed, quiet):
    """``n`` instances of the task ``chosen``, ``group`` (else rollout.group_size) samples each, by
    the experiment's policy (the warm start where ``warm``), the code tool offered where ``tools``
    and the experiment has one, and the contract checks on them: (batch, contract, tokenizer)."""

    from ..rollout.backends import make_engine
    from ..tasks import make_task
    from ..training.contract import sample_and_check

    names = [t.name for t in cfg.tasks or []]
    tcfg = cfg.tasks[names.index(chosen)]
    tasks = [make_task(t.name, t.params) for t in cfg.tasks or []]
    the_task = tasks[names.index(chosen)]
    model, tok = episode_policy(cfg, tasks, warm, out_dir, quiet=quiet)
    if tools and cfg.tools is not None:
        from ..tasks.tooled import with_tools

        the_task = with_tools(the_task, cfg.tools, tok)
    engine = make_engine(cfg.rollout, model, tok, seed=seed)
    batch, contract = sample_and_check(
        engine,
        model,
        tok,
        the_task,
        the_task.instances(training_seeds(the_task, n, seed)),
        group or cfg.rollout.group_size,
        cfg.rollout,
        seed=seed,
        reward_range=tcfg.reward_range or the_task.reward_range,
    )
    return batch, contract, tok


@app.command()
def run(
    config: ConfigArg = Path("experiments.yaml"),
    out_dir: OutOpt = None,
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="No live progress bars.")
    ] = False,
    reuse_finished: Annotated[
        bool,
        typer.Option(
            "--reuse-finished",
            help="Reuse finished runs made by other code (otherwise a code change reruns them); "
            "the audit and the report flag them.",
        ),
    ] = False,
    add: AddOpt = False,
    no_cache: Annotated[
        bool,
        typer.Option(
            "--no-cache",
            help="Neither read nor keep the warm start in this machine's cache "
            "(~/.cache/sixblanks/warm_start, or $SIXBLANKS_CACHE/warm_start): train it in the "
            "output directory unless it is already there.",
        ),
    ] = False,
    keep_warm: Annotated[
        float | None,
        typer.Option(
            "--keep-warm",
            metavar="MINUTES",
            min=0,
            help="Keep the workers' fork server (torch and the training code imported: about 4.5 s "
            "of every command) for the next commands of the same code, until it has been idle "
            "this many minutes; later commands use it with or without the option. 0: stop it.",
        ),
    ] = None,
) -> None:
    """Run every arm x task x seed of the experiment under its matched budget (skips finished runs
    of the same code, resumes unfinished ones)."""

    from ..orchestration import kept_server

    # both for this command only (a test calls commands in one process)
    if keep_warm == 0 and kept_server.stop():
        say("stopped the kept worker server of this code")
    with (
        _env(kept_server.ENV, None if keep_warm is None else repr(float(keep_warm))),
        _env("SIXBLANKS_NO_CACHE", "1" if no_cache else None),
    ):
        _run_checked(config, out_dir, no_progress, reuse_finished, add)


@contextmanager
def _env(name: str, value: str | None):
    """Within the block, the environment variable ``name`` set to ``value`` (None: left as it
    is); restored afterwards."""

    if value is None:
        yield
        return
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def _run_checked(config: Path, out_dir, no_progress: bool, reuse_finished: bool, add: bool):
    """``run``'s work: the config checked and its plan and cautions shown, the experiment run, then
    its report, summary and fairness flags; RunFailed naming the runs that failed."""

    from ..config import load_config
    from ..orchestration.command import out_dir_of, run_experiment
    from ..orchestration.data_files import check_data_files
    from ..orchestration.orchestrator import RunFailed

    cfg = load_config(config)
    check_data_files(cfg)  # a file of pairs, read now: its problems before any run
    out_path = out_dir_of(cfg, out_dir)
    say(f"[green]valid[/green]: {config}  ->  {out_path}")
    say(plan_table(cfg))
    from ..config.checks import cautions

    for line in cautions(cfg):
        warn(f"caution: {line}")
    log = (lambda m: err.print(f"[dim]{m}[/dim]")) if not STATE["quiet"] else None
    result, report_path = run_experiment(
        cfg,
        out_path,
        log=log,
        warn=warn,
        progress=not (no_progress or STATE["quiet"]),
        reuse_finished=reuse_finished,
        add=add,
        on_result=lambda result: _print_summary(result["summary"], cfg),
    )
    say(f"report: {report_path}")
    _say_summary(out_path)
    flags = result["fairness"]["flags"]
    if flags:
        fairness = ExperimentDir(out_path).fairness
        say(f"[yellow]fairness audit: {len(flags)} flag(s)[/yellow] (see {fairness})")
        for f in flags[:10]:
            say(f"  {f['arm']}: {f['item']}: {f['reason']}")
    if result["failures"]:
        raise RunFailed([f"run {rid} failed: {e}" for rid, e in result["failures"].items()])


def _say_summary(directory: Path, baseline: str | None = None) -> None:
    """Per arm its mean final score with a 95% t interval over seeds, then one sentence per pair
    of arms (sixblanks/reports/summary.py, as the report and ``Results.summary()`` give them)."""

    from rich.text import Text

    from sixblanks.reports.build import summary_of
    from sixblanks.reports.data import ReportError

    try:
        lines = summary_of(directory, baseline).lines()
    except ReportError as exc:  # the report said so already; the summary adds nothing then
        warn(f"no summary: {exc}")
        return
    for line in lines:
        say(Text(line))  # plain text: an interval's brackets are not console markup


def _print_summary(rows, cfg) -> None:
    table = Table(title="runs")
    for col in ("arm", "task", "seed", "state", "start", "final", *cfg.budget):
        table.add_column(col)
    for r in rows:
        counters = r.get("counters") or {}
        fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
        table.add_row(
            r["arm"],
            r["task"],
            str(r["seed"]),
            str(r["state"]),
            fmt(r.get("start_score")),
            fmt(r.get("final_score")),
            *[f"{human(counters.get(k, 0))}/{human(v)}" for k, v in cfg.budget.items()],
        )
    say(table)


@app.command()
def report(
    directories: Annotated[
        list[Path],
        typer.Argument(help="Experiment output directory; two or more: compare the experiments."),
    ],
    baseline: Annotated[
        str | None, typer.Option("--baseline", help="Arm for P(improvement); default: the first.")
    ] = None,
    resamples: Annotated[
        int, typer.Option("--resamples", min=100, help="Bootstrap resamples.")
    ] = 2000,
    compare_out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="With two or more directories: where the comparison goes; default DIR1/compare.",
        ),
    ] = None,
) -> None:
    """Build the comparison report (DIR/report/index.html, report.md, scores.csv/.parquet) from
    results.duckdb; with several directories, compare the experiments side by side (the same arms
    on two backends, models or code versions): scores, differences and every audit item that
    differs."""

    from ..errors import ConfigError
    from ..orchestration.command import build_report_checked

    if len(directories) == 1:
        if compare_out is not None:
            raise ConfigError("--out: only for comparing two or more experiment directories")
        say(f"report: {build_report_checked(directories[0], baseline, resamples)}")
        _say_summary(directories[0], baseline)
        return
    if baseline is not None:
        raise ConfigError("--baseline: only for the report of one experiment directory")
    path = build_report_checked(directories[0], None, resamples, directories[1:], compare_out)
    say(f"comparison: {path}")


@app.command()
def status(
    directory: Annotated[Path, typer.Argument(help="Experiment output directory.")],
    as_json: JsonOpt = False,
) -> None:
    """Per run: state, consumption per budgeted counter, last evaluation and ETA."""

    exp_dir = experiment_dir(directory, "run `sixblanks run` first")
    rows = _status_rows(exp_dir)
    if as_json:
        dump_json(rows)
        return
    table = Table(title=f"status: {directory}")
    for col in ("run", "arm", "task", "seed", "state", "step", "budget", "last eval", "ETA"):
        table.add_column(col)
    for r in rows:
        lim = r["limits"] or {}
        used = ", ".join(_used(r, k, v) for k, v in lim.items()) if r["counters"] else "-"
        ev = f"{r['last_eval']['score']:.3f}" if r["last_eval"] else "-"
        eta = f"{r['eta_seconds']:.0f}s" if r["eta_seconds"] is not None else "-"
        state = r["state"] + (f" ({r['error'][:50]})" if r.get("error") else "")
        table.add_row(
            r["run_id"],
            str(r["arm"] or "-"),
            str(r["task"] or "-"),
            str(r["seed"] if r["seed"] is not None else "-"),
            state,
            str(r["step"] if r["step"] is not None else "-"),
            used,
            ev,
            eta,
        )
    show(table)


def _status_rows(exp_dir: ExperimentDir) -> list[dict[str, Any]]:
    """One row per run of the experiment, in its order: identity, state, step, counters and
    limits, last evaluation, the time overshoot bound, an ETA (seconds; a running run's elapsed
    time scaled by the budget left) and the error, redacted."""

    import time as _time

    from ..orchestration.progress import budget_fraction
    from ..redact import redact_opt

    run_ids = exp_dir.read_experiment()["runs"]
    rows = []
    now = _time.time()
    for rid in run_ids:
        st = exp_dir.run(rid).read_status()
        frac = budget_fraction(st)
        eta = None
        if st.get("state") == "running" and frac > 0 and st.get("started"):
            eta = (st.get("updated", now) - st["started"]) * (1 - frac) / frac
        rows.append(
            {
                "run_id": rid,
                "arm": st.get("arm"),
                "task": st.get("task"),
                "seed": st.get("seed"),
                "state": st.get("state", "pending"),
                "step": st.get("step"),
                "counters": st.get("counters"),
                "limits": st.get("limits"),
                "last_eval": st.get("last_eval"),
                "time_overshoot_bound": st.get("time_overshoot_bound"),
                "eta_seconds": eta,
                "error": redact_opt(st.get("error")),
            }
        )
    return rows


def _used(row: dict[str, Any], counter: str, limit: float) -> str:
    """``counter used/limit``; a time limit can be passed by at most one step and its checkpoint:
    the bound measured so far is shown beside it."""

    bound = row["time_overshoot_bound"] or {}
    extra = f" (+<={bound[counter]:.1f}s)" if counter in bound else ""
    return f"{counter} {human(row['counters'].get(counter, 0))}/{human(limit)}{extra}"


@app.command()
def sync(directory: Annotated[Path, typer.Argument(help="Experiment output directory.")]) -> None:
    """Send runs that MLflow has not received yet (e.g. after the tracking server was
    unreachable)."""

    from ..config import validate_mapping
    from ..orchestration.tracking import Tracker, tracking_uri
    from ..redact import is_redacted, without_userinfo

    exp_dir = experiment_dir(directory)
    exp = exp_dir.read_experiment()
    cfg = validate_mapping(exp["config"] | {"tasks": exp["config"]["tasks"]})
    fairness = read_json(exp_dir.fairness)
    t = cfg.tracking
    uri, hint = tracking_uri(t.uri, directory), ""
    if is_redacted(uri):
        # experiment.json keeps no password: MLFLOW_TRACKING_URI where set, else the stored
        # server with the credentials MLflow reads from its own variables
        uri = os.environ.get("MLFLOW_TRACKING_URI") or without_userinfo(uri)[0]
        hint = (
            " (experiment.json keeps no password: set MLFLOW_TRACKING_USERNAME and "
            "MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_URI)"
        )
    state = Tracker(directory, uri, t.experiment or cfg.name, enabled=True).sync(
        exp["runs"], fairness, [exp_dir.report] if exp_dir.report.exists() else None
    )
    if state.get("last_error"):
        raise SixblanksError(
            f"MLflow unreachable: {state['last_error']}; {len(state['pending'])} run(s) still "
            f"pending{hint}"
        )
    parent = state.get("parent_status")
    ended = f"; the experiment's MLflow run is {parent}" if parent else ""
    say(
        f"synced {plural(len(state['synced']), 'run')} to MLflow; pending: "
        f"{len(state['pending'])}{ended}"
    )


@app.command()
def ingest(
    directory: Annotated[Path, typer.Argument(help="Experiment output directory.")],
) -> None:
    """Rebuild results.duckdb from the run directories (and the audit, ladder and sweep files); a
    damaged store is set aside as results.duckdb.damaged-<time> first, never deleted."""

    from ..store.database import rebuild

    if not ExperimentDir(directory).experiment.exists():
        from ..errors import ConfigError

        raise ConfigError(f"{directory}: not an experiment output directory (no experiment.json)")
    with OutDirLock(directory, "ingest", log=warn):
        rebuild(directory, log=lambda m: err.print(m))


@app.command()
def ui(
    directory: Annotated[Path, typer.Argument(help="Experiment output directory.")],
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1.")] = 5000,
    wait: Annotated[
        int,
        typer.Option(
            "--wait", min=1, help="Seconds to wait for the UI to answer before giving up."
        ),
    ] = 180,
) -> None:
    """Start the MLflow UI on the experiment's store, bound to localhost; its address is printed
    once it answers."""

    db = ExperimentDir(directory).mlflow_db
    if not db.exists():
        from ..errors import ConfigError

        raise ConfigError(
            f"{db}: no MLflow store here (run `sixblanks run` first, or set tracking.uri)"
        )
    url = f"http://127.0.0.1:{port}"
    if port_taken(port):
        from ..errors import ConfigError

        raise ConfigError(f"--port {port}: something already listens at {url}; choose another")
    say(f"starting the MLflow UI on {db} (it can take half a minute) ...", console=err)
    raise typer.Exit(serve(ui_command(db, port), url, wait))
