"""Where a run goes on a Ray cluster, and what it may use there.

- **Fit before launch.** Ray queues a task no node can hold and waits forever ("infeasible"). Each
  run asks for ``executor.num_cpus`` CPUs, ``executor.num_gpus`` GPUs (a fraction shares one GPU
  between runs: 0.5 puts two runs on it) and, where set, ``executor.memory_gib``; a request that no
  live node of the cluster can hold is refused before anything starts, naming the request and every
  node's resources (:func:`check_fits`).
- **Shared output directory.** A run writes its directory where the orchestrator reads it, so
  every node must see the output directory (a shared file system: NFS, a cluster volume). One probe
  task per node reads a file the orchestrator just wrote; a node that does not see it refuses the
  experiment before launch (:func:`check_shared_storage`). Nothing is copied, so nothing can be
  ingested twice.
- **Placement recorded.** Each run writes ``placement.json`` (node, host, resources, GPU ids, its
  GPU share) into its run directory, and the store keeps it (``runs.placement``). Device-seconds
  are measured per run, by the run's own process (CUDA time on a GPU); on a GPU shared with other
  runs (a share below 1) they are labelled ``shared``: the GPU was busy with others too.
- **vLLM's memory share.** A run with a GPU share below 1 gives its vLLM engine that share of
  ``rollout.vllm.gpu_memory_utilization`` (``rollout/gpu_share.py``), so co-located runs do not
  overcommit the device's memory.

The Ray task that runs one placed run is :func:`~.ray_executor.run_placed`.
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path
from typing import Any

from ..errors import SixblanksError
from ..rollout.gpu_share import gpu_share


class PlacementError(SixblanksError):
    """A run that no node of the cluster can hold, or a node that cannot see the output
    directory."""


def resources(num_cpus: float, num_gpus: float, memory_gib: float | None) -> dict[str, float]:
    """A run's request in Ray's resource names (``memory`` in bytes)."""

    req = {"CPU": float(num_cpus), "GPU": float(num_gpus)}
    if memory_gib:
        req["memory"] = float(memory_gib) * 2**30
    return req


def _describe(res: dict[str, float]) -> str:
    parts = [f"{res.get('CPU', 0):g} CPU", f"{res.get('GPU', 0):g} GPU"]
    if "memory" in res:
        parts.append(f"{res['memory'] / 2**30:.1f} GiB memory")
    return ", ".join(parts)


def check_fits(request: dict[str, float], nodes: list[dict[str, Any]]) -> None:
    """Raise :class:`PlacementError` unless one node's total resources hold ``request``.

    ``nodes``: Ray's ``ray.nodes()`` entries (``Alive``, ``NodeID``, ``NodeManagerAddress``,
    ``Resources``)."""

    alive = [n for n in nodes if n.get("Alive")]
    for n in alive:
        have = n.get("Resources", {})
        if all(have.get(k, 0.0) >= v for k, v in request.items() if v > 0):
            return
    listing = "; ".join(
        f"node {n['NodeID'][:8]} ({n.get('NodeManagerAddress', '?')}): "
        f"{_describe({k: n.get('Resources', {}).get(k, 0.0) for k in ('CPU', 'GPU', 'memory')})}"
        for n in alive
    )
    raise PlacementError(
        f"each run asks for {_describe(request)} (executor.num_cpus, executor.num_gpus"
        f"{', executor.memory_gib' if 'memory' in request else ''}), and no node of the cluster "
        f"has that: {listing or 'no live node'}. Ask for less, or add a node that has it."
    )


def cuda_ranks(model_cfg) -> bool:
    """Whether the runs are data-parallel on CUDA (each run's ranks take GPUs 0..N-1 of the
    machine: two such runs at once on one machine would share them, so they run one at a time)."""

    par = model_cfg.parallel
    return par is not None and par.world_size > 1 and model_cfg.device.startswith("cuda")


def this_machine() -> dict[str, Any]:
    """This machine as a Ray node entry (where the executor starts a cluster of its own)."""

    gpus = 0
    try:
        import torch

        gpus = torch.cuda.device_count()
    except ImportError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {
        "Alive": True,
        "NodeID": "this-machine",
        "NodeManagerAddress": socket.gethostname(),
        "Resources": {
            "CPU": float(os.cpu_count() or 1),
            "GPU": float(gpus),
            "memory": float(memory),
        },
    }


def cluster_nodes() -> list[dict[str, Any]]:
    import ray

    return [n for n in ray.nodes() if n.get("Alive")]


def _read_probe(path: str) -> dict[str, Any]:
    try:
        text = Path(path).read_text()
    except OSError:
        text = None
    return {"host": socket.gethostname(), "text": text}


def check_shared_storage(out_dir: str | Path, nodes: list[dict[str, Any]]) -> None:
    """One task on each node reads a file just written under ``out_dir``; a node that does not see
    it raises :class:`PlacementError` naming it."""

    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nonce = uuid.uuid4().hex
    probe = Path(out_dir).resolve() / f".node-probe-{nonce}"
    probe.write_text(nonce)
    try:
        task = ray.remote(num_cpus=0, max_retries=0)(_read_probe)
        refs = {
            task.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
            ).remote(str(probe)): n
            for n in nodes
        }
        blind = []
        for ref, n in refs.items():
            got = ray.get(ref, timeout=120)
            if got["text"] != nonce:
                blind.append(f"node {n['NodeID'][:8]} ({got['host']})")
    finally:
        probe.unlink(missing_ok=True)
    if blind:
        raise PlacementError(
            f"{', '.join(blind)} cannot see the output directory {probe.parent}: runs write their "
            "directories there, so every node must mount it (a shared file system such as NFS, at "
            "the same path)"
        )


def placement_info(num_cpus: float, num_gpus: float) -> dict[str, Any]:
    """Where this Ray task runs and what it holds (``placement.json``)."""

    import ray

    share = gpu_share(num_gpus) if num_gpus > 0 else 0.0
    return {
        "executor": "ray",
        "node_id": ray.get_runtime_context().get_node_id(),
        "node_ip": ray.util.get_node_ip_address(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "num_cpus": float(num_cpus),
        "num_gpus": float(num_gpus),
        "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
        "gpu_share": share,
        "device_seconds": "shared" if 0 < share < 1 else "own",
    }
