"""A data-parallel run on a Ray cluster: one placement group of ``world_size`` bundles packed on one
node (each bundle ``executor.num_cpus`` CPUs, and one GPU on CUDA), a Ray task per rank on its
bundle, the process group's address and port taken on bundle 0's node.

Each rank task runs :func:`~.rank_launch.rank_main`, as torchrun's workers do on one machine: rank 0
writes the run's files. A rank that fails or whose worker dies ends the run (its peers error on the
lost connection); the run's status names the rank, the placement group is removed, and the same
command resumes the run from rank 0's last checkpoint.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..layout import RunDir
from ..runspec import RunSpec
from .rank_launch import failed_rank, prepare_dir, record_rank_failure


def rank_request(spec: RunSpec, num_cpus: float) -> dict[str, float]:
    """One rank's bundle: ``num_cpus`` CPUs, and one GPU where the run is on CUDA."""

    gpu = 1.0 if str(spec.model["device"]).startswith("cuda") else 0.0
    return {"CPU": float(num_cpus), **({"GPU": gpu} if gpu else {})}


def _rendezvous() -> tuple[str, int]:
    """Bundle 0's node address and a free port on it (for the process group's master)."""

    import ray

    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    return ray.util.get_node_ip_address(), port


def _rank_task(run_dir: str, warm_dir: str, threads: int, ckpt: float, env: dict[str, str]) -> int:
    from .rank_worker import rank_main

    os.environ.update(env)
    # Ray shows each task its own bundle's GPU only: it is device 0 of this process
    os.environ["LOCAL_RANK"] = "0"
    return rank_main([run_dir, warm_dir, str(threads), str(ckpt)])


@dataclass
class PlacedRun:
    """A data-parallel run's rank tasks on their placement group."""

    run_dir: Path
    group: Any
    refs: list[Any] = field(default_factory=list)

    def done(self, finished: set) -> bool:
        return all(r in finished for r in self.refs)

    def outcome(self) -> dict[str, Any]:
        """The run's result (rank 0's), or its failure naming the rank; the group is removed."""

        import ray
        from ray.util.placement_group import remove_placement_group

        codes: list[int | str] = []
        for r in self.refs:
            try:
                codes.append(int(ray.get(r)))
            except Exception as exc:  # noqa: BLE001 - a rank's worker died: named below
                codes.append(f"{type(exc).__name__}")
        remove_placement_group(self.group)
        rd = RunDir(self.run_dir)
        if all(c == 0 for c in codes) and rd.result.exists():
            return {"ok": True, "summary": json.loads(rd.result.read_text(encoding="utf-8"))}
        # a rank that failed writes its error and exits (its worker then reads as dead); one
        # killed outright leaves no error file
        silent = [
            i
            for i, c in enumerate(codes)
            if isinstance(c, str) and not (rd.path / f"rank{i}.error.json").exists()
        ]
        rank, why = failed_rank(rd, "")
        if silent and (rank is None or not _own_error(rd, rank)):
            rank, why = silent[0], f"its Ray worker died ({codes[silent[0]]})"
        error = record_rank_failure(rd, rank, f"rank {rank} of {len(codes)} failed: {why}")
        return {"ok": False, "error": str(error), "run_id": rd.run_id}


def _own_error(rd: RunDir, rank: int) -> bool:
    try:
        err = json.loads((rd.path / f"rank{rank}.error.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return not err.get("peer_lost")


def submit(
    spec: RunSpec, run_dir, warm_dir, threads: int, ckpt: float, num_cpus: float
) -> PlacedRun:
    """Place the run's ranks (one node, STRICT_PACK) and start a task per rank."""

    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy as OnBundle

    prepare_dir(spec, run_dir)
    world = spec.world_size
    bundle = rank_request(spec, num_cpus)
    group = placement_group([dict(bundle) for _ in range(world)], strategy="STRICT_PACK")
    ray.get(group.ready())
    where = ray.remote(num_cpus=0)(_rendezvous).options(
        scheduling_strategy=OnBundle(group, placement_group_bundle_index=0)
    )
    addr, port = ray.get(where.remote())
    task = ray.remote(_rank_task)
    placed = PlacedRun(Path(run_dir), group)
    for rank in range(world):
        env = {
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": addr,
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": str(max(1, threads)),
        }
        opts = {
            "num_cpus": bundle["CPU"],
            "num_gpus": bundle.get("GPU", 0.0),
            "max_retries": 0,
            "scheduling_strategy": OnBundle(group, placement_group_bundle_index=rank),
        }
        placed.refs.append(
            task.options(**opts).remote(str(run_dir), str(warm_dir), threads, ckpt, env)
        )
    return placed
