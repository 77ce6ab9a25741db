# %% [markdown]
# # sixblanks from Python
#
# A notebook's worth of the Python API (`import sixblanks`): an experiment as a mapping, run,
# results as polars frames, the budget ledger, the same results read back later. Each `# %%` is a
# cell (VS Code and Jupytext open this file as a notebook). `python examples/notebook.py` runs it
# top to bottom in a minute or two on a laptop CPU; `tests/test_api.py` runs it too.

# %%
import polars as pl

import sixblanks

# An experiment is a YAML file's path ("experiments.yaml") or, as here, a mapping of the same keys.
experiment = {
    "name": "notebook",
    "task": {"name": "arithmetic", "eval_size": 16},
    "rollout": {"max_new_tokens": 6, "prompts_per_step": 4, "group_size": 4},
    "warm_start": {"steps": 20, "num_demos": 200},
    "budget": {"launched_tokens": 480},  # every arm gets the same budget
    "seeds": [0, 1],
    "arms": {"grpo": {"preset": "grpo"}, "rloo": {"preset": "rloo"}},
    "tracking": {"mlflow": False},
}
OUT = "runs/notebook"

# %% [markdown]
# `run` does what `sixblanks run` does: the shared warm start, every arm x seed under the matched
# budget, the store and the report (`runs/notebook/report/index.html`). A second call skips the
# finished runs.

# %%
results = sixblanks.run(experiment, out=OUT)
print(results.scores.select("arm", "seed", "start_score", "final_score"))

# %% [markdown]
# Scores are of one held-out split (`results.split`); the report's statistics are in
# `sixblanks.reports`. A mean per arm:

# %%
print(results.split)
print(results.scores.group_by("arm").agg(pl.col("final_score").mean()).sort("arm"))

# %% [markdown]
# The budget ledger: every run's counters after each step. The last row of each run is what it
# spent; no arm passed the budget.

# %%
spent = results.ledger.sort("step").group_by("run_id").last()
print(spent.select("run_id", "launched_tokens", "accepted_tokens", "discarded_tokens"))
assert spent["launched_tokens"].max() <= experiment["budget"]["launched_tokens"]

# %% [markdown]
# Later, from the output directory alone (any table of the store by name):

# %%
again = sixblanks.load(OUT)
assert again.scores.equals(results.scores)
print(again.table("budgets"))
