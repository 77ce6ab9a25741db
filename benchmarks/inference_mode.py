"""The HF engine's generation under ``torch.inference_mode`` (as it runs) against ``no_grad`` (as it
ran before), side by side in one process, alternating: the median time of a batch's generation
each way and their ratio, at vs_trl's shapes (8 prompts x 8 samples x 32 tokens) and the default
experiment's (8 prompts x 8 samples x 6 tokens); and that both draw the same tokens and log-probs
from the same generator state.

    .venv/bin/python benchmarks/inference_mode.py [--rounds 5] [--calls 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from vs_trl_setup import policy  # noqa: E402

from sixblanks.harness.rollout.engine import HFEngine, SamplingParams  # noqa: E402


def _ways(eng: HFEngine, prompts: list, params: SamplingParams, group: int):
    """The two ways of generating one batch, each from a generator seeded ``seed``."""

    no_grad_generate = HFEngine.generate.__wrapped__  # the same method without its decorator

    def plain(seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            return no_grad_generate(eng, prompts, params, n=group, generator=g)

    def inference(seed: int = 0):
        return eng.generate(prompts, params, n=group, generator=torch.Generator().manual_seed(seed))

    return {"no_grad": plain, "inference_mode": inference}


def _drawn(gens) -> list:
    return [(x.token_ids, x.logprobs) for row in gens for x in row]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=10, help="generations timed per round and way")
    args = ap.parse_args()
    torch.set_num_threads(1)
    _, model, tok = policy()
    eng = HFEngine(model, tok)
    for label, prompts_n, group, new in (("vs_trl", 8, 8, 32), ("default", 8, 8, 6)):
        prompts = [tok(f"{i}+{i}=")["input_ids"] for i in range(prompts_n)]
        params = SamplingParams(max_new_tokens=new, temperature=1.0, ignore_eos=True)
        ways = _ways(eng, prompts, params, group)
        plain, inference = ways["no_grad"], ways["inference_mode"]
        same = all(_drawn(plain(s)) == _drawn(inference(s)) for s in range(3))
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.rounds):
            for name, f in ways.items():
                ts = []
                for _ in range(args.calls):
                    t0 = time.perf_counter()
                    f()
                    ts.append(time.perf_counter() - t0)
                times[name].append(statistics.median(ts))
        a, b = (statistics.median(times[k]) for k in ("no_grad", "inference_mode"))
        print(
            f"{label} ({prompts_n} prompts x {group} samples x {new} tokens): no_grad "
            f"{a * 1000:.2f} ms, inference_mode {b * 1000:.2f} ms: {a / b:.3f}x; the same tokens "
            f"and log-probs: {'yes' if same else 'NO'}"
        )


if __name__ == "__main__":
    main()
