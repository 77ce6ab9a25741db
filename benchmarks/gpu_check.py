"""The GPU check, sized to the GPU machine that may be lent (no network, its own PyTorch and
transformers, no vLLM, MLflow, DuckDB, Polars, Ray or Optuna, 64 MiB carried, 15 minutes in all):

1. sixblanks GRPO against TRL's ``GRPOTrainer`` at SmolLM2-135M's shape (hidden 576, 30 layers,
   9 query heads over 3 key/value heads, MLP 1536, vocabulary 49152; random weights, built here:
   nothing is downloaded), bfloat16 on one GPU, the batch of ``benchmarks/vs_trl.py`` (8 prompts x
   8 samples x 32 new tokens, EOS ignored) through the same two functions, alternating runs;
2. where two or more GPUs are lent, the data-parallel path (DDP, one rank a GPU under torchrun)
   against one GPU sampling as the ranks sample (each group with a generator of its own): steps/s
   of both, and the first update's loss and gradient norm, which must agree.

The prompts are the arithmetic task's; random weights never answer them, so the reward is a hash
of each completion's text (the same function on both sides): every group then has a spread of
rewards, both trainers do all of a policy-gradient update, and the data-parallel comparison
compares non-zero gradients.

Printed: steps/s of each side and their ratio (median of the alternating pairs), the
data-parallel row, and ``skipped: why`` for each part that cannot run (TRL not importable, one
GPU). Exit code 0 when every part that could run passed, 1 when one failed, 2 on a machine
without CUDA (nothing checked).

The training path imports no tracking, store or cluster package: this script makes duckdb,
polars, mlflow, ray, optuna and vllm (and the project's other needs that machine lacks:
orjson, reasoning_gym, math_verify, gguf) absent before anything else (``None`` in
``sys.modules``), on that machine and here alike. What it needs beyond PyTorch and transformers
travels as wheels in ``.gpu-carry/`` (``bash benchmarks/gpu_carry.sh``: pydantic, TRL, datasets
and what they need, about 7 MiB); it installs them for this interpreter into a folder under the
temporary directory and puts that first on ``sys.path``.

    bash benchmarks/gpu_carry.sh                     # once, here: .gpu-carry/
    python3 benchmarks/gpu_check.py                  # there: carry .gpu-carry
    python benchmarks/gpu_check.py --dry-run         # here: CPU, a small shape, two gloo ranks

``--dry-run`` runs the same parts on the CPU with a shape of the same head layout (hidden 72,
2 layers, 9 over 3 heads, MLP 192, vocabulary 1024), 2 prompts x 4 samples x 8 tokens and one
timed step, and the data-parallel part over two CPU ranks (gloo): it proves the check starts.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CARRY = ROOT / ".gpu-carry"
ABSENT = ("duckdb", "polars", "mlflow", "ray", "optuna", "vllm")
"""The store, tracking and cluster packages and vLLM: the lent machine has none of them."""
NOT_CARRIED = ("orjson", "reasoning_gym", "math_verify", "gguf")
"""The project's other needs that the lent machine lacks; the training path reads none of them."""
# sixblanks from this checkout, vs_trl beside this file; appended: nothing installed is shadowed
for path in (ROOT, HERE):
    if str(path) not in sys.path:
        sys.path.append(str(path))


@dataclass(frozen=True)
class Shape:
    """A Llama decoder's shape: what a step's time depends on."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int


SMOLLM2 = Shape(hidden=576, layers=30, heads=9, kv_heads=3, intermediate=1536, vocab=49152)
SMALL = Shape(hidden=72, layers=2, heads=9, kv_heads=3, intermediate=192, vocab=1024)


def block_absent() -> None:
    """Make the packages the lent machine lacks absent here too. ``None`` in ``sys.modules``
    makes ``import x`` raise ImportError and ``importlib.util.find_spec(x)`` return None, which
    is how transformers, TRL and datasets decide that an optional package is not installed."""

    for name in ABSENT + NOT_CARRIED:
        if sys.modules.get(name) is not None:
            raise RuntimeError(f"{name} was imported before the check could make it absent")
        sys.modules[name] = None


def use_carried() -> str:
    """Install the carried wheels for this interpreter (once: a folder under the temporary
    directory, named by the wheels) and put them first on the path, the child processes' too.
    Returns what it did, in words."""

    wheels = sorted(CARRY.glob("*.whl"))
    if not wheels:
        return "no carried set (.gpu-carry/): the packages installed here are used"
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    key = hashlib.sha256("\n".join(w.name for w in wheels).encode()).hexdigest()[:12]
    site = Path(tempfile.gettempdir()) / f"sixblanks-gpu-carry-{tag}-{key}"
    if not (site / ".complete").exists():
        # pip picks, of each name, the wheel built for this Python
        names = sorted({w.name.split("-")[0] for w in wheels})
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-index",
            "--no-deps",
            "--disable-pip-version-check",
            "--upgrade",
            "--target",
            str(site),
            "--find-links",
            str(CARRY),
            *names,
        ]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"installing the carried wheels failed:\n{done.stderr[-2000:]}")
        (site / ".complete").touch()
    sys.path.insert(0, str(site))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(site), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    mib = sum(w.stat().st_size for w in wheels) / 2**20
    return f"carried set: {len(wheels)} wheels ({mib:.1f} MiB), installed in {site}"


# --------------------------------------------------------------------------------- the policy


def hash_reward_task():
    """The arithmetic task, rewarded by a hash of the completion's text (0, 0.25, ..., 1):
    random weights never answer, and a reward that is always 0 would leave no gradient."""

    from sixblanks.harness.tasks import make_task

    task = make_task("arithmetic")
    task.verify = lambda instance, response: (zlib.crc32(response.encode()) % 5) / 4
    return task


def padded_tokenizer(alphabet: str, vocab: int):
    """The project's character-level tokenizer, its vocabulary filled up to ``vocab`` tokens
    (``<x123>``: no text encodes to one, sampled ones decode to their names), so that the model's
    output head and the text sampled from it are those of a real vocabulary of that size."""

    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    from sixblanks.harness.models import build_tokenizer

    base = build_tokenizer(alphabet)
    spec = json.loads(base.backend_tokenizer.to_str())
    table = spec["model"]["vocab"]
    table.update({f"<x{i}>": i for i in range(len(table), vocab)})
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(spec)),
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<unk>",
        clean_up_tokenization_spaces=False,
    )
    tok.padding_side = "left"
    return tok


def policy(shape: Shape, device: str, bf16: bool):
    """(task, model, tokenizer): a Llama model of ``shape`` with random weights from seed 0."""

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    task = hash_reward_task()
    tok = padded_tokenizer(task.alphabet(), shape.vocab)
    config = LlamaConfig(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=8192,
        rope_theta=100000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    return task, model.to(device, torch.bfloat16 if bf16 else torch.float32), tok


# ---------------------------------------------------------------------------------- the parts


def setup_for(dry_run: bool):
    """The batch and precision of each mode: vs_trl's batch in bfloat16 on a GPU; a small batch
    in float32 on the CPU for the dry run."""

    from vs_trl import Setup

    if dry_run:
        return Setup(prompts=2, group=4, new_tokens=8, device="cpu")
    return Setup(device="cuda", bf16=True)


def trl_problem() -> str | None:
    """Why TRL cannot run here (None: it can)."""

    try:
        import datasets  # noqa: F401 - TRL's GRPOTrainer reads its prompts from a Dataset
        import trl  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any failure to import is the reason to skip
        return f"TRL cannot be imported ({type(exc).__name__}: {exc}); carry .gpu-carry"
    return None


def first_update(metrics: list[dict[str, Any]]) -> dict[str, float]:
    return {k: float(metrics[0][k]) for k in ("loss", "grad_norm")}


def single(shape: Shape, setup, steps: int, reps: int, trl: bool, reference: bool) -> dict:
    """World size 1: sixblanks against TRL in alternating runs (``trl``: where TRL imports), and
    (``reference``) one sixblanks run that samples as the ranks of a data-parallel run do, its
    first update recorded. The entry point of the check's first process and of its test."""

    from vs_trl import alternating_runs, quiet_logs, sixblanks_run

    quiet_logs()
    task, model0, tok = policy(shape, setup.device, setup.bf16)
    out: dict[str, Any] = {"params": sum(p.numel() for p in model0.parameters())}
    print(f"policy: {out['params'] / 1e6:.1f}M parameters on {setup.device}", flush=True)
    why = trl_problem() if trl else "not asked for"
    if why is None:
        print(
            f"sixblanks and TRL: one uncounted run each, then {reps} alternating pairs of "
            f"{steps} timed steps",
            flush=True,
        )
        ours, theirs, ratio = alternating_runs(task, model0, tok, steps, reps, setup)
        out.update(sixblanks_s=ours, trl_s=theirs, ratio=ratio)
        out["from"] = {
            m: str(Path(sys.modules[m].__file__).parent.parent)
            for m in ("pydantic", "trl", "datasets")
        }
    else:
        out["trl_skipped"] = why
        out["sixblanks_s"] = statistics.median(sixblanks_run(task, model0, tok, steps, setup=setup))
    if reference:
        print("one device, sampling and forwarding as the ranks do", flush=True)
        # the ranks forward every row whole (no shared prefix under DDP): so does the reference
        alike = replace(setup, group_seeds=True, shared_prefix=False)
        metrics: list[dict[str, Any]] = []
        times = sixblanks_run(task, model0, tok, steps, setup=alike, metrics=metrics)
        out["reference"] = {"s": statistics.median(times), **first_update(metrics)}
    return out


def rank(shape: Shape, setup, steps: int) -> dict | None:
    """One rank of the data-parallel part (torchrun's worker): its GPU (the CPU in the dry run),
    the process group, the same run as the reference with ``model.parallel``. Rank 0's result."""

    from vs_trl import sixblanks_run

    from sixblanks.harness.training import parallel

    world = int(os.environ["WORLD_SIZE"])
    device = setup.device
    if device == "cuda":
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    dp = parallel.init("ddp", world, device)
    try:
        task, model0, tok = policy(shape, device, setup.bf16)
        alike = replace(setup, device=device, parallel={"backend": "ddp", "world_size": world})
        metrics: list[dict[str, Any]] = []
        times = sixblanks_run(task, model0, tok, steps, setup=alike, metrics=metrics)
        if not dp.writer:
            return None
        return {"world": world, "s": statistics.median(times), **first_update(metrics)}
    finally:
        parallel.shutdown()


# --------------------------------------------------------------------------------- the driver


def child(cmd: list[str], out: Path, name: str, timeout: float, env: dict[str, str]) -> dict:
    """Run one part in a process of its own (its output shown as it comes); its result file."""

    print(f"\n--- {name} ---", flush=True)
    t0 = time.perf_counter()
    try:
        done = subprocess.run(
            cmd, env={**os.environ, "PYTHONUNBUFFERED": "1", **env}, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{name} ran past its {timeout:.0f} s") from None
    if done.returncode != 0:
        raise RuntimeError(f"{name} exited with code {done.returncode}")
    print(f"--- {name}: {time.perf_counter() - t0:.0f} s ---", flush=True)
    return json.loads((out / f"{name}.json").read_text())


def part_args(args: argparse.Namespace, part: str) -> list[str]:
    flags = ["--part", part, "--out", str(args.out), "--steps", str(args.steps)]
    flags += ["--reps", str(args.reps)] + (["--dry-run"] if args.dry_run else [])
    return flags + (["--no-trl"] if args.no_trl else [])


def report_single(r: dict, setup, dry_run: bool) -> None:
    shape = "a small shape of SmolLM2's head layout" if dry_run else "SmolLM2-135M's shape"
    dtype = "bfloat16" if setup.bf16 else "float32"
    print(
        f"\nsixblanks GRPO at {shape} ({r['params'] / 1e6:.1f}M parameters, random weights), "
        f"{dtype} on {setup.device}: {setup.prompts} prompts x {setup.group} samples x "
        f"{setup.new_tokens} tokens"
    )
    if "trl_s" in r:
        print(f"  TRL GRPOTrainer   {r['trl_s']:8.3f} s/step {1 / r['trl_s']:8.2f} steps/s")
    print(f"  sixblanks         {r['sixblanks_s']:8.3f} s/step {1 / r['sixblanks_s']:8.2f} steps/s")
    if "ratio" in r:
        print(f"  sixblanks / TRL steps/s: {r['ratio']:.2f}x (median of the alternating pairs)")
        print("  " + ", ".join(f"{m} from {where}" for m, where in r["from"].items()))
    else:
        print(f"skipped: TRL's GRPOTrainer: {r['trl_skipped']}")


def report_parallel(ref: dict, dp: dict, bf16: bool) -> bool:
    """Prints the data-parallel row; True where its first update disagrees with one process's."""

    tol = 1e-2 if bf16 else 1e-4  # bfloat16 products differ with the micro-batch's rows
    dl = abs(dp["loss"] - ref["loss"])
    dg = abs(dp["grad_norm"] - ref["grad_norm"]) / max(abs(ref["grad_norm"]), 1e-12)
    print(
        f"data parallel (DDP, torchrun, {dp['world']} ranks): {1 / dp['s']:.2f} steps/s against "
        f"{1 / ref['s']:.2f} on one device sampling alike ({ref['s'] / dp['s']:.2f}x); first "
        f"update: |loss difference| {dl:.3g}, gradient norm {dp['grad_norm']:.4g} against "
        f"{ref['grad_norm']:.4g} (relative {dg:.3g}, allowed {tol:g})"
    )
    if dg > tol or dl > tol * max(abs(ref["loss"]), 1.0):
        print("FAILED: the data-parallel run's first update differs from one process's")
        return True
    return False


def report_summary(results: dict, setup, dry_run: bool, world: int) -> bool:
    """Prints the summary of the parts that ran (``world``: the data-parallel ranks, 0 where that
    part could not run); True where the data-parallel update disagrees with one process's."""

    print("\n=== summary ===")
    failed = False
    if "single" in results:
        report_single(results["single"], setup, dry_run)
    if "ranks" in results:
        failed = report_parallel(results["single"]["reference"], results["ranks"], setup.bf16)
    elif not world:
        print("skipped: data parallel (DDP over torchrun): this machine has one GPU")
    elif "single" not in results:
        print("skipped: data parallel: the one-device part, which it is compared with, failed")
    return failed


def drive(args: argparse.Namespace, carried: str) -> int:
    """The check: the single-device part, then the data-parallel part where it can run."""

    import torch
    import transformers

    cuda = torch.cuda.is_available()
    print(
        f"GPU check: Python {sys.version.split()[0]}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}; {carried}"
    )
    if not cuda and not args.dry_run:
        print("no CUDA GPU on this machine: nothing checked (--dry-run runs it on the CPU)")
        return 2
    gpus = torch.cuda.device_count() if cuda and not args.dry_run else 0
    if gpus:
        print(f"{gpus} GPU(s): {torch.cuda.get_device_name(0)}")
    setup = setup_for(args.dry_run)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in ("single", "ranks"):  # a result is read only from the process that wrote it now
        (args.out / f"{name}.json").unlink(missing_ok=True)
    # the dry run: two CPU ranks (gloo) prove the torchrun path starts
    world = 2 if args.dry_run else min(gpus, setup.prompts) if gpus >= 2 else 0
    me = [sys.executable, str(Path(__file__).resolve())]
    # one GPU for the first part: TRL's Trainer would spread its batch over every visible GPU
    seen = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] if gpus else ""
    env = {"CUDA_VISIBLE_DEVICES": seen} if gpus else {}
    failed, results = False, {}
    first = me + part_args(args, "single") + (["--reference"] if world else [])
    try:
        results["single"] = child(first, args.out, "single", 300, env)
    except RuntimeError as exc:
        failed = True
        print(f"FAILED: one device: {exc}")
    if world and not failed:
        launch = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={world}",
            "--max-restarts=0",
        ]
        try:
            results["ranks"] = child(
                launch + me[1:] + part_args(args, "ranks"), args.out, "ranks", 180, {}
            )
        except RuntimeError as exc:
            failed = True
            print(f"FAILED: data parallel: {exc}")
    failed |= report_summary(results, setup, args.dry_run, world)
    print("FAILED" if failed else "passed: every part that could run")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=4, help="Timed steps a run (after one warm-up).")
    ap.add_argument("--reps", type=int, default=3, help="Alternating runs of each side.")
    ap.add_argument("--dry-run", action="store_true", help="The CPU, a small shape: it starts.")
    ap.add_argument("--no-trl", action="store_true", help="sixblanks alone.")
    ap.add_argument(
        "--out",
        type=Path,
        default=Path(tempfile.gettempdir()) / "sixblanks-gpu-check",
        help="Where the parts leave their results (JSON).",
    )
    ap.add_argument("--part", choices=["single", "ranks"], help=argparse.SUPPRESS)
    ap.add_argument("--reference", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.dry_run:
        args.steps, args.reps = min(args.steps, 1), min(args.reps, 1)
    block_absent()  # first: nothing may have imported them yet
    carried = use_carried()  # before torch: the carried typing-extensions must be the one loaded
    if args.part is None:
        return drive(args, carried)
    if args.dry_run:
        import torch

        torch.set_num_threads(1)  # the CPU's cores are shared: one a process, as vs_trl runs
    shape, setup = (SMALL if args.dry_run else SMOLLM2), setup_for(args.dry_run)
    if args.part == "single":
        r = single(shape, setup, args.steps, args.reps, not args.no_trl, args.reference)
    else:
        r = rank(shape, setup, args.steps)
    if r is not None:
        (args.out / f"{args.part}.json").write_text(json.dumps(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
