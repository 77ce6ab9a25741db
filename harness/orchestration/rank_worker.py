"""One rank of a data-parallel run (torchrun's worker, or a Ray task on its bundle): join the
process group, run the spec; rank 0 writes the run's files, the others none. A rank that fails
writes ``rank<r>.error.json`` in the run's directory for the launcher (:mod:`.rank_launch`), then
exits."""

from __future__ import annotations

import json
import os
import sys
import time

from ..layout import RunDir
from .rank_launch import PEER_LOST, die_with_parent


def rank_main(argv: list[str]) -> int:
    """One rank (torchrun's worker): join the group, run the spec, write nothing but rank 0."""

    from .. import layout
    from ..errors import describe
    from ..training import parallel
    from .runner import execute_run

    run_dir, warm_dir, threads, ckpt_s = argv[0], argv[1], int(argv[2]), float(argv[3])
    rd = RunDir(run_dir)
    spec = rd.read_spec()  # the launcher wrote it there: torchrun passes no objects
    par = spec.model["parallel"]
    rank = int(os.environ.get("RANK", "0"))
    die_with_parent()  # torchrun (or a Ray worker) gone: this rank goes too
    if str(spec.model["device"]).startswith("cuda"):
        # the rank sees its own GPU only, as device 0: the trainer and a vLLM engine (which picks
        # its device by itself) then share it, whatever else the machine has
        seen = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = seen.split(",") if seen else [str(i) for i in range(256)]
        os.environ["CUDA_VISIBLE_DEVICES"] = ids[int(os.environ.get("LOCAL_RANK", "0"))]
        os.environ["LOCAL_RANK"] = "0"
    try:
        dp = parallel.init(par.get("backend", "ddp"), int(par["world_size"]), spec.model["device"])
        layout.NOT_WRITTEN = None if dp.writer else rd.path.resolve()
        execute_run(spec, run_dir, warm_dir, threads, ckpt_s)
        return 0
    except BaseException as exc:  # noqa: BLE001 - recorded for the launcher, then the exit code
        text = describe(exc, f"run {rd.run_id}'s files")
        peer = any(w in f"{type(exc).__name__}: {exc}" for w in PEER_LOST)
        (rd.path / f"rank{rank}.error.json").write_text(
            json.dumps({"rank": rank, "time": time.time(), "error": text, "peer_lost": peer}),
            encoding="utf-8",
        )
        # no orderly shutdown of a group a peer may have left (NCCL could wait out its watchdog)
        sys.stderr.flush()
        os._exit(1)
    finally:
        parallel.shutdown()


if __name__ == "__main__":
    from ..ending import end_now

    _code = rank_main(sys.argv[1:])
    end_now(_code)  # without the teardown of torch and transformers that torchrun would wait for
    raise SystemExit(_code)
