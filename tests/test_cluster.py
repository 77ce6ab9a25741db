"""A cluster, on this machine : two Ray nodes (`ray start --head`, then
`ray start --address`, each on ports of its own), a PostgreSQL server holding the sweep's Optuna
study, and an MLflow tracking server on a PostgreSQL database. The tests start every one of them
and stop them afterwards (tests/servers.py)."""

import json
import os
import re

import pytest
import yaml

from .conftest import query
from .servers import MlflowServer, PostgresServer, RayCluster, free_port

pytestmark = [pytest.mark.xdist_group("ray"), pytest.mark.slow]  # one Ray cluster at a time

BASE = {
    "task": {"name": "arithmetic", "eval_size": 8},
    "rollout": {"max_new_tokens": 6, "prompts_per_step": 4, "group_size": 4},
    "warm_start": {"steps": 10, "num_demos": 100},  # placement is tested here, not learning
    "budget": {"launched_tokens": 300},
    "arms": {"grpo": {"preset": "grpo"}},
}


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """(PostgreSQL, MLflow server on a PostgreSQL database of it)."""

    pg = PostgresServer()
    ml = None
    try:
        pg.start()
        ml = MlflowServer(tmp_path_factory.mktemp("mlflow"), backend=pg.create("mlflow"))
        ml.start(wait=False)  # it comes up while the Ray nodes start; the test waits for it
        yield pg, ml
    finally:
        if ml is not None:
            ml.kill()
        pg.remove()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A head node with 1 CPU, and a worker node with 1 CPU and 1 GPU (declared: Ray schedules on
    what a node declares, so placement is tested without a GPU; the runs themselves use the CPU)."""

    c = RayCluster(tmp_path_factory.mktemp("ray"))
    try:
        c.add_node(num_cpus=1, head=True)
        c.add_node(num_cpus=1, num_gpus=1)
        c.node_ids = {n["NodeID"] for n in c.nodes(expected=2)}
        c.gpu_node = next(n["NodeID"] for n in c.nodes(2) if n["Resources"].get("GPU"))
        yield c
    finally:
        c.stop()


def _config(tmp_path, name: str, **extra) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, **BASE, **extra}))
    return str(path)


def _results(out) -> dict[int, tuple]:
    """{seed: (final score, counters but time)} of an experiment's runs."""

    res = {}
    for run in (out / "runs").iterdir():
        seed = json.loads((run / "spec.json").read_text())["seed"]
        result = json.loads((run / "result.json").read_text())
        counters = {k: v for k, v in result["counters"].items() if not k.endswith("_seconds")}
        res[seed] = (result["final_score"], counters)
    return res


def _placements(out) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*/placement.json"))]


def test_runs_and_a_sweep_spread_over_two_nodes_with_postgres_and_an_mlflow_server(
    servers, cluster, tmp_path, cli, monkeypatch
):
    """`sixblanks run` on the two-node cluster, tracked on the MLflow server: its two runs (one CPU
    each, one CPU per node) land one on each node, write their directories where the orchestrator
    reads them (the shared-storage probe passes), are ingested once, give the numbers the local
    executor gives, and reach MLflow. Their task reads a data file named relative to the experiment
    file, from a command started in another directory: the workers, in directories of their own,
    find it. Then
    `sixblanks sweep` with its study in PostgreSQL, two trials at once: one trial on each node,
    both in the database, the search total kept."""

    import optuna
    from mlflow.tracking import MlflowClient

    pg, ml = servers
    ml.wait()
    executor = {"kind": "ray", "address": cluster.address, "num_cpus": 1}
    tracking = {"uri": ml.url, "experiment": "cluster"}
    out = tmp_path / "run"
    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(9) for b in range(9)]
    (tmp_path / "sums.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = {"name": "dataset", "params": {"path": "sums.jsonl"}, "eval_size": 8}
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    run = {"seeds": [0, 1], "task": task}
    path = _config(tmp_path, "cluster-run", executor=executor, tracking=tracking, **run)
    code, _, err = cli("run", path, "--out", str(out), "--no-progress")
    assert code == 0, err
    placed = _placements(out)
    assert len(placed) == 2 and {p["node_id"] for p in placed} == cluster.node_ids
    assert all(p["gpu_share"] == 0.0 and p["device_seconds"] == "own" for p in placed)
    ((n_runs, n_placed),) = query(out, "SELECT count(*), count(placement) FROM runs")
    assert n_runs == n_placed == 2  # each run once, with its placement
    steps = {
        d.name: sum(json.loads(line)["type"] == "step" for line in (d / "events.jsonl").open())
        for d in (out / "runs").iterdir()
    }
    assert dict(query(out, "SELECT run_id, count(*) FROM ledger GROUP BY run_id")) == steps
    # the same experiment on the local executor gives the same numbers, run for run
    local = tmp_path / "local"
    local_run = {"executor": {"workers": 2}, "tracking": {"mlflow": False}}
    path = _config(tmp_path, "cluster-run", **run, **local_run)
    code, _, err = cli("run", path, "--out", str(local), "--no-progress")
    assert code == 0, err
    assert _results(local) == _results(out) and len(_results(out)) == 2
    client = MlflowClient(tracking_uri=ml.url)
    exp = client.get_experiment_by_name("cluster")
    tracked = [
        r for r in client.search_runs([exp.experiment_id]) if "sixblanks.run_id" in r.data.tags
    ]
    assert sorted(r.data.tags["sixblanks.run_id"] for r in tracked) == sorted(steps)

    storage = pg.create("optuna")
    sweep = {
        "n_trials": 2,
        "parallel": 2,
        "sampler": "random",
        "seed": 0,
        "pruner": "none",
        "storage": storage,
        "trial_budget": {"launched_tokens": 300},
        "total_budget": {"launched_tokens": 600},
        "space": {"grpo": {"optimizer.lr": {"type": "categorical", "choices": [3e-4, 1e-3]}}},
        "confirm_seeds": [7],
    }
    path = _config(
        tmp_path,
        "cluster-sweep",
        seeds=[0],
        executor=executor,
        sweep=sweep,
        tracking={"mlflow": False},
    )
    out = tmp_path / "sweep"
    code, _, err = cli("sweep", path, "--out", str(out))
    assert code == 0, err
    rec = json.loads((out / "sweep" / "sweep.json").read_text())["arms"]["grpo"]
    assert rec["complete"] == 2 and rec["spent"]["launched_tokens"] <= 600
    assert {t["worker"]["node_id"] for t in rec["trials_detail"]} == cluster.node_ids
    study = optuna.load_study(study_name="cluster-sweep:grpo", storage=storage)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]
    assert sorted(t.value for t in study.trials) == sorted(t["value"] for t in rec["trials_detail"])


def test_fractional_gpus_share_one_gpu_and_a_run_that_cannot_fit_is_refused(cluster, tmp_path, cli):
    """Half a GPU and half a CPU per run: both runs go to the one node with a GPU, at the same
    time, on the same GPU, each labelled a shared device. Two GPUs per run fit on no node: refused
    before the warm start, naming the request and each node's resources."""

    out = tmp_path / "half"
    executor = {"kind": "ray", "address": cluster.address, "num_cpus": 0.5, "num_gpus": 0.5}
    path = _config(
        tmp_path, "half-gpu", seeds=[0, 1], executor=executor, tracking={"mlflow": False}
    )
    code, _, err = cli("run", path, "--out", str(out), "--no-progress")
    assert code == 0, err
    placed = _placements(out)
    assert len(placed) == 2 and {p["node_id"] for p in placed} == {cluster.gpu_node}
    assert placed[0]["gpu_ids"] == placed[1]["gpu_ids"] and len(placed[0]["gpu_ids"]) == 1
    assert all(p["gpu_share"] == 0.5 and p["device_seconds"] == "shared" for p in placed)
    status = [
        json.loads((out / "runs" / d / "status.json").read_text()) for d in os.listdir(out / "runs")
    ]
    spans = sorted((s["started"], s["finished"]) for s in status)
    assert spans[1][0] < spans[0][1]  # the second started before the first finished: co-located
    placement = json.loads(query(out, "SELECT placement FROM runs LIMIT 1")[0][0])
    assert placement["device_seconds"] == "shared"

    executor.update(num_cpus=1, num_gpus=2)
    path = _config(tmp_path, "two-gpus", executor=executor, tracking={"mlflow": False})
    code, _, err = cli("run", path, "--out", str(tmp_path / "two"), "--no-progress")
    assert code == 1 and "each run asks for 1 CPU, 2 GPU" in err, err
    nodes = re.findall(r"node ([0-9a-f]{8}) \(", err)  # each node named, with what it has
    assert {n for n in nodes} == {i[:8] for i in cluster.node_ids}
    assert "1 CPU, 1 GPU" in err and "1 CPU, 0 GPU" in err
    assert not (tmp_path / "two" / "warm_start").exists()  # refused before anything started


def test_a_server_missing_at_start_is_a_clear_error_before_anything_runs(tmp_path, cli):
    """No MLflow server at tracking.uri, no PostgreSQL at sweep.storage: each is named, with the
    reason, and nothing started (no warm start)."""

    closed = free_port()
    path = _config(tmp_path, "no-mlflow", tracking={"uri": f"http://127.0.0.1:{closed}"})
    code, _, err = cli("run", path, "--out", str(tmp_path / "a"), "--no-progress")
    assert (
        code == 1
        and f"tracking.uri: no MLflow tracking server answers at http://127.0.0.1:{closed}" in err
    )
    assert "Connection refused" in err and not (tmp_path / "a" / "warm_start").exists()

    storage = f"postgresql+psycopg2://postgres@127.0.0.1:{closed}/optuna"
    sweep = {
        "n_trials": 1,
        "storage": storage,
        "trial_budget": {"launched_tokens": 300},
        "total_budget": {"launched_tokens": 300},
        "space": {"grpo": {}},
    }
    path = _config(tmp_path, "no-pg", sweep=sweep, tracking={"mlflow": False})
    code, _, err = cli("sweep", path, "--out", str(tmp_path / "b"))
    shown = storage.replace("postgres@", "***@")  # user-info never printed
    assert code == 1 and f"sweep.storage: cannot connect to {shown}" in err, err
    assert "Connection refused" in err and not (tmp_path / "b" / "warm_start").exists()


def test_a_gpu_share_sets_the_engine_memory_share_and_whole_gpus_above_one():
    """vLLM's memory share is the run's share of the GPU times rollout.vllm.gpu_memory_utilization
    (two runs at 0.5 with 0.3 each take 0.15 of the device, 0.3 together: the configured total);
    a request above one GPU must be whole (Ray places no fraction above 1)."""

    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.errors import SixblanksError
    from sixblanks.harness.orchestration.placement import check_fits
    from sixblanks.harness.rollout.gpu_share import SHARE_VAR, engine_memory_share, gpu_share

    assert engine_memory_share(0.3, gpu_share(0.5)) == pytest.approx(0.15)
    assert engine_memory_share(0.3, gpu_share(2.0)) == pytest.approx(0.3)  # whole GPUs: as set
    os.environ[SHARE_VAR] = "0.25"  # what run_placed sets in a Ray task
    try:
        assert engine_memory_share(0.8) == pytest.approx(0.2)
    finally:
        del os.environ[SHARE_VAR]
    assert engine_memory_share(0.8) == pytest.approx(0.8)  # outside a Ray task: the whole share
    with pytest.raises(SixblanksError, match="num_gpus 1.5: a share of one GPU"):
        validate_mapping({"name": "x", **BASE, "executor": {"kind": "ray", "num_gpus": 1.5}})
    node = {
        "Alive": True,
        "NodeID": "ab" * 8,
        "NodeManagerAddress": "10.0.0.7",
        "Resources": {"CPU": 8.0, "GPU": 1.0, "memory": 32 * 2**30},
    }
    check_fits({"CPU": 8.0, "GPU": 0.5, "memory": 16 * 2**30}, [node])
    with pytest.raises(
        SixblanksError,
        match=r"asks for 1 CPU, 0 GPU, 64.0 GiB memory .*"
        r"node abababab \(10.0.0.7\): 8 CPU, 1 GPU, 32.0 GiB memory",
    ):
        check_fits({"CPU": 1.0, "GPU": 0.0, "memory": 64 * 2**30}, [node])
