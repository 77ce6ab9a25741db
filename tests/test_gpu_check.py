"""The GPU check's training path (benchmarks/gpu_check.py) runs on the lent GPU machine, which has
no duckdb, polars, mlflow, ray, optuna or vllm: here they are made absent in a fresh interpreter
(``None`` in ``sys.modules``) and every import that asks for one is recorded, then a tiny policy
trains a few steps through the check's own entry point."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ABSENT = ("duckdb", "polars", "mlflow", "ray", "optuna", "vllm")

# Runs before anything else in the child. An import statement goes through builtins.__import__,
# importlib.import_module does not: both are recorded, so that an import some code catches (a
# fallback on ImportError) still fails the test.
PRELUDE = """
import builtins, importlib, json, sys
ABSENT = {absent!r}
asked = []
for name in ABSENT:
    assert name not in sys.modules, name
    sys.modules[name] = None
real_import, real_import_module = builtins.__import__, importlib.import_module

def recorded(name, globals=None, locals=None, fromlist=(), level=0):
    if level == 0 and name.split(".")[0] in ABSENT:
        asked.append([name, (globals or {{}}).get("__name__")])
    return real_import(name, globals, locals, fromlist, level)

def recorded_module(name, package=None):
    if name.split(".")[0] in ABSENT:
        asked.append([name, "importlib.import_module"])
    return real_import_module(name, package)

builtins.__import__, importlib.import_module = recorded, recorded_module
sys.path.insert(0, {benchmarks!r})
"""

TRAIN = """
import gpu_check
from vs_trl import Setup

setup = Setup(prompts=2, group=2, new_tokens=4)
r = gpu_check.single(gpu_check.SMALL, setup, steps=2, reps=1, trl=False, reference=True)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ABSENT and sys.modules[m] is not None)
print("RESULT " + json.dumps({"result": r, "asked": asked, "loaded": loaded}))
"""


def test_the_training_path_runs_without_the_store_tracking_and_cluster_packages():
    code = PRELUDE.format(absent=ABSENT, benchmarks=str(ROOT / "benchmarks")) + TRAIN
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-4000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    out = json.loads(line.removeprefix("RESULT "))
    assert out["asked"] == [], f"imports of absent packages: {out['asked']}"
    assert out["loaded"] == []
    r = out["result"]
    assert r["trl_skipped"] == "not asked for"
    assert r["sixblanks_s"] > 0 and r["reference"]["s"] > 0
    # the hashed reward gives the groups a spread: the first update has a gradient
    assert r["reference"]["grad_norm"] > 0


def test_the_padded_tokenizer_has_the_vocabulary_and_keeps_the_text():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    tok = gpu_check.padded_tokenizer("0123456789+-=", 1024)
    assert len(tok) == 1024
    ids = tok("12+7=19", add_special_tokens=False)["input_ids"]
    assert max(ids) < 100 and tok.decode(ids) == "12+7=19"
    assert tok.decode([1000]) == "<x1000>"
