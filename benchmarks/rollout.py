"""Rollout throughput: the HF engine against a bare ``model.generate`` loop on the same batch.

Prints tokens/s of both, side by side in one run, and their ratio (target: engine >= 0.9x),
then episodes/s of the agent loop on guess_number.

    .venv/bin/python benchmarks/rollout.py [--batch 64] [--new 32] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

import torch

from harness.config import ModelConfig
from harness.models import load_policy
from harness.rollout.agent import run_episodes
from harness.rollout.engine import HFEngine, SamplingParams
from harness.tasks import make_task


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))

    task = make_task("arithmetic", {"digits": 3})
    model, tok = load_policy(ModelConfig(), [task])
    model.eval()
    prompts = [
        [tok.bos_token_id, *tok(i.prompt, add_special_tokens=False)["input_ids"]]
        for i in task.instances(list(range(args.batch)))
    ]
    L = max(map(len, prompts))
    ids = torch.full((len(prompts), L), tok.pad_token_id)
    attn = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, L - len(p) :], attn[i, L - len(p) :] = torch.tensor(p), 1
    engine = HFEngine(model, tok)
    # no stop, no EOS: both generate exactly args.new tokens per sequence
    params = SamplingParams(temperature=1.0, max_new_tokens=args.new)

    def run_engine():
        gens = engine.generate(prompts, params, generator=torch.Generator().manual_seed(0))
        return sum(len(g.token_ids) for (g,) in gens)

    def run_generate():
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=attn,
                do_sample=True,
                max_new_tokens=args.new,
                min_new_tokens=args.new,
                pad_token_id=tok.pad_token_id,
                eos_token_id=None,
            )
        return (out.shape[1] - L) * out.shape[0]

    # engine's stop-token table: exclude the eos from stopping by disabling it for the timing
    eos = tok.eos_token_id
    tok.eos_token_id = None
    try:
        run_engine(), run_generate()  # warm-up
        res = {"engine": [], "generate": []}
        for _ in range(args.repeats):
            for name, fn in (("engine", run_engine), ("generate", run_generate)):
                t0 = time.perf_counter()
                n = fn()
                res[name].append(n / (time.perf_counter() - t0))
    finally:
        tok.eos_token_id = eos
    best = {k: max(v) for k, v in res.items()}
    print(
        f"batch {args.batch} x {args.new} new tokens, tiny model ({sum(p.numel() for p in model.parameters()):,} params)"
    )
    print(f"  HF engine (sampling + log-probs): {best['engine']:10.0f} tokens/s")
    print(f"  bare model.generate (sampling):   {best['generate']:10.0f} tokens/s")
    print(
        f"  ratio engine / generate:          {best['engine'] / best['generate']:10.2f}x  (target >= 0.90x)"
    )

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
        f"agent loop on guess_number: {batch.size} episodes, {float(batch.n_turns.float().mean()):.1f} turns each, "
        f"{batch.size / dt:.1f} episodes/s"
    )


if __name__ == "__main__":
    main()
