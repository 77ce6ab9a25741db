"""Data parallelism (``model.parallel``) on this machine's CPU: two ranks on gloo, spawned by the
tests, against the single process with the same per-group sampling seeds (``rollout.group_seeds``).

- Gradients after the first minibatch and parameters after a step's optimizer steps equal the
  single process's within 1e-5 relative (float32), for DDP and FSDP2, over every normalization
  mode, several minibatches and epochs, an odd row count with uneven micro-batches, and a target-KL
  stop; a normalization computed per rank (planted here) fails the same comparison.
- A 2-rank `sixblanks run` counts what one process counts (every non-time counter, discards by
  reason, steps); a rank killed mid-run fails the run at once naming the rank, leaves no process,
  and the same run resumes to the uninterrupted run's counters.
"""

from __future__ import annotations

import copy
import glob
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from sixblanks.algorithms.normalization import MODES
from sixblanks.harness.layout import RunDir
from tests import terminal
from tests.short_runs import golden_initial

ROOT = Path(__file__).resolve().parents[1]
TOL = 1e-5
# the module's fixtures (ranks spawned once, one 2-rank run) on one xdist worker
pytestmark = pytest.mark.xdist_group("dataparallel")

CASES = {
    **{f"mode {m}": ("grpo", {"normalization": {"mode": m}}, {}) for m in MODES},
    # several minibatches; 15 rows (odd), 2 per micro-batch: uneven shares, a rank out of rows
    "minibatches": (
        "grpo",
        {"data": {"minibatches": 3}},
        {"prompts_per_step": 3, "group_size": 5, "micro_batch_size": 2},
    ),
    # an odd row count smaller than one micro-batch per rank
    "odd rows": ("rloo", {}, {"prompts_per_step": 3, "group_size": 3, "micro_batch_size": 64}),
    # the target-KL rule stops the epochs after the first minibatch (any drift exceeds it)
    "target kl": (
        "grpo",
        {"data": {"minibatches": 2, "epochs": 2}, "weight": {"target_kl": 1e-9}},
        {},
    ),
}
PLANTED = "planted per-rank normalization"


def one_step(initial, preset: str, blanks: dict, rollout: dict, parallel=None):
    """(gradients after the first minibatch, parameters after the step, the step's metrics, the
    ledger's counters) of one step from the golden initial policy."""

    from sixblanks.algorithms.presets import resolve
    from sixblanks.harness.training import RunSettings, Trainer
    from sixblanks.harness.training.parallel import full_tensors

    cfg, task, model0, tok = initial
    s = RunSettings(
        blanks=resolve(preset, blanks),
        rollout=cfg.rollout.model_copy(update={"group_seeds": True, **rollout}),
        optimizer=cfg.optimizer,
        budget={"launched_tokens": 1e9},
        seed=0,
        eval_size=8,
        name=preset,
        parallel=parallel,
    )
    tr = Trainer(s, task, copy.deepcopy(model0), tok)
    tr.state_dict()  # as a run's start checkpoint does: it must not touch the optimizer
    grads: list[dict[str, torch.Tensor]] = []
    step = tr.ctx.clip_and_step

    def record():
        if not grads:
            grads.append(
                {
                    n: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).clone()
                    for n, p in tr.ctx.model.named_parameters()
                    if p.grad is not None
                }
            )
        return step()

    tr.ctx.clip_and_step = record
    res = tr.train(max_steps=1, evaluate_start=False)
    params = {k: v.detach().clone() for k, v in full_tensors(tr.ctx.model)}
    return grads[0], params, res.steps[0], dict(tr.ledger.counters)


def resumed_vs_straight(initial, parallel) -> tuple[dict, dict]:
    """(weights after 3 steps straight, weights after 2 steps, a checkpoint's state loaded into a
    new trainer, and a third step): a resume through the full-state checkpoint (FSDP2: weights
    and Adam moments gathered, then sharded again) continues exactly."""

    from sixblanks.algorithms.presets import resolve
    from sixblanks.harness.training import RunSettings, Trainer
    from sixblanks.harness.training.parallel import full_tensors

    cfg, task, model0, tok = initial

    def trainer():
        s = RunSettings(
            blanks=resolve("grpo", {"data": {"minibatches": 2}}),
            rollout=cfg.rollout.model_copy(update={"group_seeds": True}),
            optimizer=cfg.optimizer,
            budget={"launched_tokens": 1e9},
            seed=0,
            eval_size=8,
            name="grpo",
            parallel=parallel,
        )
        return Trainer(s, task, copy.deepcopy(model0), tok)

    straight = trainer()
    straight.train(max_steps=3, evaluate_start=False)
    first = trainer()
    first.train(max_steps=2, evaluate_start=False)
    # rank 0's state, as every rank reads it from the checkpoint rank 0 wrote (FSDP2 gathers
    # the optimizer's moments onto rank 0 only)
    state = first.ctx.dp.from_rank0(first.state_dict())
    again = trainer()
    again.load_state_dict(state)
    again.train(max_steps=3, evaluate_start=False)
    weights = [
        {k: v.detach().clone() for k, v in full_tensors(t.ctx.model)} for t in (straight, again)
    ]
    return weights[0], weights[1]


def _planted_per_rank_weights():
    """Patch the policy-gradient objective's loss weights to be computed over this rank's share of
    the minibatch only: the per-rank normalization the data-parallel code must not do."""

    from sixblanks.harness.training import parallel
    from sixblanks.harness.training.objectives import pg_pass  # the update pass's loss weights

    real = pg_pass.loss_weights

    def per_rank(mask, mode, l_max, count_empty_rows, **ids):
        mine = list(parallel.current().share(mask.shape[0]))
        w = torch.zeros_like(mask)
        w[mine] = real(
            mask[mine], mode, l_max, count_empty_rows, **{k: v[mine] for k, v in ids.items()}
        )
        return w

    pg_pass.loss_weights = per_rank
    return lambda: setattr(pg_pass, "loss_weights", real)


def _rank(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
    from sixblanks.harness.training import parallel

    parallel.init("ddp", world)
    initial = golden_initial()
    results = {}
    for backend in ("ddp", "fsdp2"):
        parallel._CURRENT = parallel.DataParallel(backend, rank, world)
        par = {"backend": backend, "world_size": world}
        for name, (preset, blanks, rollout) in CASES.items():
            results[backend, name] = one_step(initial, preset, blanks, rollout, par)
        undo = _planted_per_rank_weights()
        results[backend, PLANTED] = one_step(initial, "grpo", {}, {}, par)
        undo()
        results[backend, "resumed"] = resumed_vs_straight(initial, par)
    if rank == 0:
        torch.save(results, out)
    parallel.shutdown()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||a||: the relative difference of two tensors."""

    return float((a - b).norm() / a.norm().clamp(min=1e-30))


def worst(ref: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> float:
    """The relative difference of two models' tensors (gradients or weights) taken as one vector
    each: a tensor whose gradient is all cancellation (attention queries and keys of this tiny
    model, about 1e-9) carries float32 noise of its own size, the model's gradient does not."""

    assert set(ref) == set(got)
    flat = [torch.cat([d[k].double().flatten() for k in sorted(ref)]) for d in (ref, got)]
    return rel(*flat)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """Every case's one step on 2 ranks (DDP and FSDP2), keyed (backend, case)."""

    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp("dp") / "ranks.pt"
    mp.spawn(_rank, args=(2, free_port(), str(out)), nprocs=2)
    return torch.load(out, weights_only=False)


@pytest.fixture(scope="module")
def one_process():
    initial = golden_initial()
    torch.set_num_threads(1)
    out = {name: one_step(initial, *case) for name, case in CASES.items()}
    out[PLANTED] = out["mode seq-mean-token-mean"]  # grpo's own mode, computed over the minibatch
    return out


@pytest.mark.parametrize("backend", ["ddp", "fsdp2"])
def test_two_ranks_update_as_one_process(two_ranks, one_process, backend):
    for name in CASES:
        g0, p0, m0, c0 = one_process[name]
        g1, p1, m1, c1 = two_ranks[backend, name]
        assert worst(g0, g1) < TOL, (name, worst(g0, g1))
        assert worst(p0, p1) < TOL, (name, worst(p0, p1))
        assert m1["optimizer_steps"] == m0["optimizer_steps"], name
        assert m1["reward_mean"] == m0["reward_mean"], name  # the same samples
        assert abs(m1["loss"] - m0["loss"]) <= 1e-5 * max(1.0, abs(m0["loss"])), name
        assert abs(m1["grad_norm"] - m0["grad_norm"]) <= TOL * m0["grad_norm"], name
        same = {k: v for k, v in c0.items() if "seconds" not in k}
        assert {k: c1[k] for k in same} == same, name
    # the cases do what they claim: several optimizer steps, and a target-KL stop
    assert one_process["minibatches"][2]["optimizer_steps"] == 3
    stop = one_process["target kl"][2]
    assert stop["early_stop_epoch"] == 0 and stop["optimizer_steps"] == 1
    # a resume from a checkpoint's full state continues as the run that never stopped
    straight, resumed = two_ranks[backend, "resumed"]
    assert worst(straight, resumed) < 1e-6
    # a normalization computed per rank gives another gradient: the comparison catches it
    g0, p0, *_ = one_process[PLANTED]
    g1, p1, *_ = two_ranks[backend, PLANTED]
    assert worst(g0, g1) > 0.1


def test_world_size_one_is_the_single_process_path():
    from tests.short_runs import short_run

    initial = golden_initial()
    _, plain = short_run(initial, "grpo", budget=300)
    cfg, task, model0, tok = initial
    from sixblanks.algorithms.presets import resolve
    from sixblanks.harness.training import RunSettings, Trainer

    s = RunSettings(
        blanks=resolve("grpo", {}),
        rollout=cfg.rollout,
        optimizer=cfg.optimizer,
        budget={"launched_tokens": 300},
        seed=0,
        eval_size=8,
        name="grpo",
        parallel={"backend": "fsdp2", "world_size": 1},
    )
    tr = Trainer(s, task, copy.deepcopy(model0), tok)
    assert tr.ctx.dp is None and tr.ctx.train_module is tr.ctx.model
    one = tr.train(evaluate_start=False)
    strip = lambda m: {  # noqa: E731
        k: v for k, v in m.items() if "seconds" not in k and "memory" not in k
    }
    assert [strip(m) for m in one.steps] == [strip(m) for m in plain.steps]


def test_validate_refuses_what_is_not_data_parallel(cli, write_yaml):
    cfg = {
        "arms": {"ppo": {"preset": "ppo"}, "dpo": {"preset": "dpo"}, "grpo": {"preset": "grpo"}},
        "task": {"name": "arithmetic"},
        "model": {"parallel": {"backend": "ddp", "world_size": 2}, "device": "cuda:1"},
        "rollout": {"backend": "vllm"},  # allowed: each rank has an engine of its own
    }
    code, out, err = cli("validate", write_yaml(json.dumps(cfg)))
    assert code != 0
    text = out + err
    assert "arms.ppo: advantage.estimator gae" in text
    assert "arms.dpo: objective dpo" in text
    assert "model.device cuda:1 with model.parallel" in text
    assert "rollout.backend vllm" not in text
    assert "arms.grpo: objective" not in text


# ------------------------------------------------------------------ whole runs

RUN = {
    "arms": {"dapo": {"preset": "dapo"}},
    "task": {"name": "arithmetic"},
    "model": {"parallel": {"backend": "ddp", "world_size": 2}},
    "warm_start": {"steps": 40, "num_demos": 300},
    "rollout": {"max_new_tokens": 6, "prompts_per_step": 4, "group_size": 4},
    "budget": {"launched_tokens": 900},
    "eval": {"size": 8},
}


@pytest.fixture(scope="module")
def dp_run(tmp_path_factory):
    """A 2-rank `sixblanks run` of DAPO (dynamic sampling discards): (output dir, spec, warm dir,
    result)."""

    from sixblanks.harness.cli import main

    tmp = tmp_path_factory.mktemp("dprun")
    path = tmp / "exp.yaml"
    path.write_text(json.dumps({**RUN, "seeds": [0], "tracking": {"mlflow": False}}))
    try:
        main(["run", str(path), "--out", str(tmp / "out")])
    except SystemExit as exc:
        assert not exc.code, f"sixblanks run exited {exc.code}"
    run_dir = Path(glob.glob(str(tmp / "out" / "runs" / "*"))[0])
    spec = RunDir(run_dir).read_spec()
    warm = glob.glob(str(tmp / "out" / "warm_start" / "*" / ""))[0]
    return tmp / "out", spec, warm, json.loads((run_dir / "result.json").read_text())


def plain(counters: dict) -> dict:
    return {k: v for k, v in counters.items() if "seconds" not in k}


def single_process(spec, warm: str, run_dir: Path) -> dict:
    """The result of ``spec`` (a RunSpec) run in one process with the per-group seeds every rank
    samples with."""

    from sixblanks.harness.orchestration.runner import execute_run

    model = {k: v for k, v in spec.model.items() if k != "parallel"}
    single_spec = spec.replace(model=model, rollout={**spec.rollout, "group_seeds": True})
    return execute_run(single_spec, run_dir, warm, threads=1)


def test_a_two_rank_run_counts_what_one_process_counts(dp_run, tmp_path):
    out, spec, warm, result = dp_run
    single = single_process(spec, warm, tmp_path / "single")
    assert plain(result["counters"]) == plain(single["counters"])
    assert result["discarded_by_reason"] == single["discarded_by_reason"]
    assert result["discarded_by_reason"]["dynamic_sampling"] > 0
    assert result["steps"] == single["steps"] and result["steps"] >= 3
    c = result["counters"]
    assert c["launched_tokens"] == c["accepted_tokens"] + c["discarded_tokens"]
    assert [e["score"] for e in result["evals"]] == [e["score"] for e in single["evals"]]
    run_dir = Path(glob.glob(str(out / "runs" / "*"))[0])
    # rank 0 alone wrote the run's files: one line per step and evaluation, one ledger log
    lines = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    assert sum(x["type"] == "step" for x in lines) == result["steps"]
    assert result["ledger_events"] > 0 and not list(run_dir.glob("rank*.error.json"))


def _rank_pid(run_dir: Path, rank: int) -> int | None:
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes()
            env = Path(f"/proc/{p}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"orchestration.rank_worker" in cmd and b"torch.distributed.run" not in cmd:
            if str(run_dir).encode() in cmd and f"RANK={rank}".encode() in env:
                return int(p)
    return None


def _left(run_dir: Path) -> list[int]:
    """Processes whose command line names ``run_dir``."""

    out = []
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and str(run_dir).encode() in Path(f"/proc/{p}/cmdline").read_bytes():
                out.append(int(p))
        except OSError:
            continue
    return out


def test_a_killed_rank_fails_the_run_naming_it_and_the_run_resumes(dp_run, tmp_path):
    from sixblanks.harness.layout import RunDir
    from sixblanks.harness.orchestration.rank_launch import RankFailed, launch

    _, spec, warm, uninterrupted = dp_run
    run_dir = tmp_path / "killed"
    box: dict = {}

    def go():
        try:
            box["result"] = launch(spec, run_dir, warm, threads=2)
        except Exception as exc:  # noqa: BLE001 - inspected below
            box["error"] = exc

    thread = threading.Thread(target=go)
    thread.start()
    deadline = time.time() + 120
    while time.time() < deadline and thread.is_alive():
        if (RunDir(run_dir).read_status().get("step") or 0) >= 2:
            break
        time.sleep(0.01)
    pid = _rank_pid(run_dir, 1)
    assert pid is not None and thread.is_alive(), "the run ended before a rank could be killed"
    killed = time.time()
    os.kill(pid, signal.SIGKILL)
    thread.join(60)
    assert not thread.is_alive() and time.time() - killed < 60
    assert isinstance(box.get("error"), RankFailed), box
    assert "rank 1 of 2" in str(box["error"]) and "SIGKILL" in str(box["error"])
    status = RunDir(run_dir).read_status()
    assert status["state"] == "failed" and status["failed_rank"] == 1
    assert _left(run_dir) == []
    # the same run resumes from rank 0's last checkpoint and ends where the uninterrupted one did
    resumed = launch(spec, run_dir, warm, threads=2)
    assert resumed["resumed_from"] is not None and resumed["resumed_from"] >= 1
    assert plain(resumed["counters"]) == plain(uninterrupted["counters"])
    assert resumed["discarded_by_reason"] == uninterrupted["discarded_by_reason"]
    assert resumed["ledger_events"] > 0  # ledger.jsonl agrees with the ledger (checked at finish)
    assert _left(run_dir) == []


if __name__ == "__main__":  # pragma: no cover - the spawned ranks import this module
    sys.exit(0)


def test_ctrl_c_stops_every_rank_and_leaves_the_run_resumable(tmp_path, write_yaml):
    """Ctrl-C (SIGINT to `sixblanks run`'s process group) in the middle of a data-parallel run:
    the command ends, no rank is left training, the run is recorded as interrupted at its last
    checkpoint (a resume from one is tested above, after a killed rank)."""

    import subprocess

    cfg = {**RUN, "seeds": [0], "tracking": {"mlflow": False}, "budget": {"launched_tokens": 3000}}
    out = tmp_path / "out"
    cmd = terminal.command("run", write_yaml(json.dumps(cfg)), "--out", str(out))
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.time() + 180
    run_dir = None
    while time.time() < deadline and proc.poll() is None:
        found = glob.glob(str(out / "runs" / "*" / "status.json"))
        if found and (json.loads(Path(found[0]).read_text() or "{}").get("step") or 0) >= 2:
            run_dir = Path(found[0]).parent
            break
        time.sleep(0.05)
    assert run_dir is not None and proc.poll() is None, "the run ended before Ctrl-C"
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=60) == 130, proc.stderr.read().decode()[-2000:]
    time.sleep(1.0)
    assert _left(run_dir) == []
    assert json.loads((run_dir / "status.json").read_text())["state"] == "interrupted"
    assert (run_dir / "checkpoint").exists() and not (run_dir / "result.json").exists()


@pytest.mark.vllm
@pytest.mark.slow
def test_a_vllm_engine_per_rank_samples_and_counts_as_one_process(tmp_path):
    """FSDP2 over 2 ranks with vLLM rollouts: each rank's engine takes the weights gathered from
    the shards after every update; the run counts and scores what one vLLM process does."""

    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.orchestration.plan import prepare_experiment
    from sixblanks.harness.orchestration.rank_launch import launch

    cfg = {
        **RUN,
        "rollout": {**RUN["rollout"], "backend": "vllm"},
        "seeds": [0],
        "budget": {"launched_tokens": 600},
        "tracking": {"mlflow": False},
        "model": {"parallel": {"backend": "fsdp2", "world_size": 2}},
    }
    plan = prepare_experiment(validate_mapping(cfg), tmp_path / "exp")
    spec = plan.specs[0]
    two = launch(spec, tmp_path / "two", str(plan.warm_dir), threads=2)
    one = single_process(spec, str(plan.warm_dir), tmp_path / "one")
    assert plain(two["counters"]) == plain(one["counters"])
    assert two["discarded_by_reason"] == one["discarded_by_reason"]
    assert two["counters"]["optimizer_steps"] >= 3
    assert [e["score"] for e in two["evals"]] == [e["score"] for e in one["evals"]]


@pytest.mark.xdist_group("ray")  # one Ray cluster at a time
def test_a_ray_placement_group_runs_the_ranks_and_counts_the_same(tmp_path, cli, write_yaml):
    """The 2-rank run, FSDP2, as one placement group of two 1-CPU bundles on a Ray cluster started
    on this machine counts and scores what one process does (a checkpoint after every step, its
    optimizer state gathered from the shards); a run no node can hold is refused before anything."""

    too_big = {
        **RUN,
        "seeds": [0],
        "tracking": {"mlflow": False},
        "executor": {"kind": "ray", "num_cpus": 2},
    }
    code, _, err = cli("run", write_yaml(json.dumps(too_big)), "--out", str(tmp_path / "big"))
    # a run's two bundles of 2 CPUs on one node: this machine has 2
    assert code != 0 and "asks for 4 CPU" in err and not (tmp_path / "big" / "runs").exists()
    cfg = {
        **too_big,
        "executor": {"kind": "ray", "num_cpus": 1},
        "model": {"parallel": {"backend": "fsdp2", "world_size": 2}},
    }
    code, _, err = cli("run", write_yaml(json.dumps(cfg)), "--out", str(tmp_path / "ray"))
    assert code == 0, err
    run_dir = Path(glob.glob(str(tmp_path / "ray" / "runs" / "*"))[0])
    result = json.loads((run_dir / "result.json").read_text())
    spec = RunDir(run_dir).read_spec()
    warm = glob.glob(str(tmp_path / "ray" / "warm_start" / "*" / ""))[0]
    single = single_process(spec, warm, tmp_path / "single")
    assert plain(result["counters"]) == plain(single["counters"])
    assert result["discarded_by_reason"] == single["discarded_by_reason"]
    assert [e["score"] for e in result["evals"]] == [e["score"] for e in single["evals"]]
    assert _left(run_dir) == []
