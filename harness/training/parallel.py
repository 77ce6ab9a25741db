"""One run over several processes (ranks): data parallelism with PyTorch DDP or FSDP2.

Every rank runs the same loop with the same seeds, so every draw from the run's generators (the
prompts of a round, each group's sampling seed, the permutation of the minibatches) is the same on
every rank. What is split, and how the pieces are put back together so that the run equals the
single-process run:

- Rollouts: each rank generates a contiguous share of each round's groups, every group with its
  own generator seeded from the run's stream (a group's samples do not depend on which rank makes
  it, nor on the other groups of its batch). The ranks then gather the round's batch, identical on
  every rank, so advantages, group statistics, filters and discards come from the single-process
  code on identical data. The round's costs are the sum of the ranks' own.
- Forward and backward: each minibatch's loss weights are computed on the whole minibatch (the
  normalization blank: a token's weight is its share of the global minibatch), then its rows are
  split among the ranks. Every rank runs the same number of micro-steps (a rank with no rows left
  forwards one row at weight zero, so that every backward's collectives match). DDP and FSDP2
  average the gradients across ranks; they are multiplied back by the world size, so the update
  is the sum over ranks, i.e. the single-process minibatch gradient. A normalization computed per
  rank (per micro-batch) would not survive this: the weights are the global ones.
- Metrics of the micro-steps are merged across ranks (sums, maxima, minima), so the target-KL rule
  reads the whole minibatch's approximate KL and stops every rank at the same minibatch; the
  gradient norm is the global one (DDP: identical gradients; FSDP2: the norm of the sharded
  gradients as a whole), so clipping and its non-finite check agree.
- Time: a charge's device seconds are summed over the ranks, its wall seconds are the longest
  rank's. Every other amount is computed from identical data, so every rank's ledger is identical;
  each step checks it (:meth:`DataParallel.check_ledger`).

The shared-prefix forward calls the model's submodules directly, past the hooks through which DDP
synchronizes gradients and FSDP2 gathers parameters: it is off under data parallelism.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch

BACKENDS = ("ddp", "fsdp2")

_CURRENT: DataParallel | None = None


def current() -> DataParallel | None:
    """This process's data-parallel group (None: a single-process run)."""

    return _CURRENT


class ParallelError(RuntimeError):
    """The ranks of a data-parallel run disagree, or its process group cannot start."""


def init(backend: str, world_size: int, device: str = "cpu") -> DataParallel:
    """Join the process group torchrun (or a Ray placement group) set up through the environment
    (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``): gloo on CPU, NCCL on CUDA. Each
    rank uses the CUDA device of its local rank."""

    global _CURRENT
    import torch.distributed as dist

    if backend not in BACKENDS:
        raise ParallelError(f"model.parallel.backend: unknown {backend!r}; valid: {list(BACKENDS)}")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != world_size:
        raise ParallelError(
            f"model.parallel.world_size is {world_size} but the launcher started {world} ranks"
        )
    cuda = device.startswith("cuda")
    local = int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0")))
    if cuda:
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    _CURRENT = DataParallel(
        backend, dist.get_rank(), dist.get_world_size(), local if cuda else None
    )
    return _CURRENT


def shutdown() -> None:
    global _CURRENT
    import gc

    import torch.distributed as dist

    if dist.is_initialized():
        # a finished trainer's objects refer to one another, so its DDP module lives on until the
        # cycle collector runs; freed after its process group, at exit, it aborted the process
        # ("terminate called without an active exception": 3 two-rank CPU runs in 22)
        gc.collect()
        dist.destroy_process_group()
    _CURRENT = None


def share(n: int, rank: int, world: int) -> range:
    """The contiguous part ``[n * r / W, n * (r + 1) / W)`` of ``n`` items that rank ``r`` takes
    (sizes differ by at most one; in rank order they are the items in order)."""

    return range(n * rank // world, n * (rank + 1) // world)


class DataParallel:
    """This rank's view of the group: which part of a list it takes, and the collectives that put
    the parts back together."""

    def __init__(self, backend: str, rank: int, world: int, cuda_device: int | None = None):
        self.backend, self.rank, self.world = backend, rank, world
        self.cuda_device = cuda_device

    @property
    def writer(self) -> bool:
        """Rank 0 writes the run's files (events, ledger log, status, checkpoints); the others
        compute the same and write nothing."""

        return self.rank == 0

    def share(self, n: int) -> range:
        return share(n, self.rank, self.world)

    def micro_parts(self, n: int, micro: int) -> list[list[int]]:
        """This rank's positions in a minibatch of ``n`` rows, in micro-batches of at most
        ``micro``; every rank gets the same number of micro-batches (an empty one: forward a row
        at weight zero)."""

        mine = list(self.share(n))
        steps = max(1, math.ceil(math.ceil(n / self.world) / micro))
        return [mine[i * micro : (i + 1) * micro] for i in range(steps)]

    # ------------------------------------------------------------------ collectives

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order (pickled: small objects, batches of a round)."""

        import torch.distributed as dist

        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def from_rank0(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (a decision every rank must take alike)."""

        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def sum_costs(self, cost: dict[str, float]) -> dict[str, float]:
        """The sum over ranks of each rank's cost (a round's rollouts: tokens, calls)."""

        out: dict[str, float] = {}
        for part in self.gather(cost):
            for k, v in part.items():
                out[k] = out.get(k, 0.0) + float(v)
        return out

    def merge_metrics(self, metrics: dict[str, float], merge: Callable) -> dict[str, float]:
        """Every rank's micro-step metrics merged by ``merge`` (sums; ``*_max``, ``*_min``)."""

        out: dict[str, float] = {}
        for part in self.gather(metrics):
            merge(out, part)
        return out

    def union_rows(
        self, values: torch.Tensor, seen: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-row values ``[B, ...]`` each rank filled for the rows it ``seen`` (``[B]`` bool),
        put together on every rank."""

        values, seen = values.clone(), seen.clone()
        for v, s in self.gather((values, seen)):
            values[s] = v[s]
            seen |= s
        return values, seen

    def time(self, device_s: float, wall_s: float) -> tuple[float, float]:
        """A charge's time over the ranks: device seconds summed, wall seconds the longest."""

        parts = self.gather((device_s, wall_s))
        return sum(p[0] for p in parts), max(p[1] for p in parts)

    def check_ledger(self, ledger, step: int) -> None:
        """Every rank's ledger must be identical (each computed the same amounts from the same
        data); the first difference fails the run, naming the rank and the counter."""

        mine = _ledger_view(ledger)
        views = self.gather(mine)
        for r, view in enumerate(views[1:], start=1):
            for key in sorted(set(views[0]) | set(view)):
                a, b = views[0].get(key), view.get(key)
                if a != b:
                    raise ParallelError(
                        f"data-parallel ledgers differ after step {step}: rank {r} has "
                        f"{key} = {b!r}, rank 0 has {a!r}"
                    )

    # ------------------------------------------------------------------ the model

    def wrap(self, model) -> Any:
        """The module the training forward goes through. DDP: a wrapper (the model itself stays
        the plain module, for checkpoints and log-prob passes that need no gradient). FSDP2: the
        model's decoder layers and then the model itself sharded in place (returned as is)."""

        if self.backend == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.cuda_device] if self.cuda_device is not None else None
            return DistributedDataParallel(model, device_ids=ids)
        from torch.distributed.fsdp import fully_shard

        for layer in _decoder_layers(model):
            fully_shard(layer)
        fully_shard(model)
        return model

    def sync(self, module, on: bool):
        """A context in which a backward synchronizes gradients (``on``: the minibatch's last
        micro-step) or only accumulates them locally."""

        if on:
            return nullcontext()
        if self.backend == "ddp":
            return module.no_sync()
        return _fsdp_no_sync(module)

    def scale_grads(self, model) -> None:
        """Undo the ranks' gradient averaging: the update is the sum of the ranks' gradients."""

        with torch.no_grad():
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.mul_(self.world)

    def full_state(self, model) -> dict[str, torch.Tensor]:
        """The model's full weights on the CPU (FSDP2: gathered one tensor at a time)."""

        return {k: v.detach().cpu().clone() for k, v in full_tensors(model)}


def full_tensors(model) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, full tensor) of the model's state, one at a time: a sharded (DTensor) entry is
    gathered from every rank (a collective: every rank must iterate alike)."""

    for k, v in model.state_dict().items():
        yield k, v.full_tensor() if hasattr(v, "full_tensor") else v


def load_full_state(model, state: dict[str, torch.Tensor]) -> None:
    """Load full weights into ``model`` (FSDP2: each rank keeps its shard of them)."""

    own = model.state_dict()
    if not any(hasattr(v, "full_tensor") for v in own.values()):
        model.load_state_dict(state)
        return
    from torch.distributed.tensor import distribute_tensor

    sharded = {}
    for k, v in own.items():
        full = state[k].to(v.dtype)
        sharded[k] = (
            distribute_tensor(full.to(v.device_mesh.device_type), v.device_mesh, v.placements)
            if hasattr(v, "full_tensor")
            else full
        )
    model.load_state_dict(sharded)


@contextmanager
def _fsdp_no_sync(module):
    module.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        module.set_requires_gradient_sync(True)


def _decoder_layers(model) -> list:
    """The repeated blocks a Hugging Face decoder keeps in ``<backbone>.layers`` (or ``h``)."""

    for name in ("model", "transformer", "base_model"):
        inner = getattr(model, name, None)
        if inner is None:
            continue
        for attr in ("layers", "h"):
            layers = getattr(inner, attr, None)
            if layers is not None:
                return list(layers)
    return []


def _ledger_view(ledger) -> dict[str, Any]:
    """A ledger's amounts that every rank must agree on: its counters (time included: every
    charge's time is reduced across the ranks first), discards by reason and event count."""

    view: dict[str, Any] = {f"counter.{k}": v for k, v in ledger.counters.items()}
    view.update({f"discarded.{k}": v for k, v in ledger.discarded_by_reason.items()})
    view.update(
        {f"discarded_rollouts.{k}": v for k, v in ledger.discarded_rollouts_by_reason.items()}
    )
    view["events"] = ledger.seq
    return view


def setup(settings, model, engine=None) -> tuple[DataParallel | None, Any]:
    """A run's data-parallel group and the module its training forward goes through (before the
    optimizer is made: FSDP2 shards the parameters it will hold). (None, model): one process.

    Under FSDP2 a rollout engine that shares the policy's module gets a full copy of its own
    (ranks sample different groups, so a sharded module, whose every forward is a collective,
    cannot generate; nor can the fast decoder read sharded weights): each step loads it from the
    shards gathered one tensor at a time (``RunContext.sync_engine``)."""

    par = settings.parallel or {}
    if int(par.get("world_size", 1)) <= 1:
        return None, model
    dp = current()
    if dp is None:
        raise ParallelError(
            f"{settings.name}: model.parallel.world_size is {par['world_size']} but this process "
            "joined no process group; a data-parallel run is started by `sixblanks run` (torchrun "
            "on one machine, a placement group on a Ray cluster)"
        )
    if (dp.world, dp.backend) != (int(par["world_size"]), par.get("backend", "ddp")):
        raise ParallelError(
            f"{settings.name}: model.parallel asks for {par.get('backend', 'ddp')} over "
            f"{par['world_size']} ranks; this process group is {dp.backend} over {dp.world}"
        )
    if dp.backend == "fsdp2" and getattr(engine, "model", None) is model:
        import copy

        engine.model = copy.deepcopy(model)
    return dp, dp.wrap(model)


def optimizer_state(model, optimizer, dp: DataParallel | None) -> dict[str, Any]:
    """The optimizer's state as one process holds it (FSDP2: the shards' moments gathered into
    full tensors on the CPU, rank 0's: the others get nothing, they write nothing). An optimizer
    that has not stepped yet is saved as it is: the gathering routine would first initialize its
    state by an optimizer step (at learning rate 0, but counted: Adam's bias correction would then
    be one step ahead)."""

    if dp is None or dp.backend != "fsdp2" or not optimizer.state:
        return optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(
        model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )


def load_optimizer_state(model, optimizer, state: dict[str, Any], dp: DataParallel | None) -> None:
    if dp is None or dp.backend != "fsdp2" or not state.get("state"):
        optimizer.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(
        model, optimizer, state, options=StateDictOptions(full_state_dict=True)
    )
