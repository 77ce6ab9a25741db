"""The column tables of docs/results-schema.md, generated from the store's ``SCHEMA``.

The names and types of every table's columns come from :data:`~.database.SCHEMA` (the ledger's
meanings from the ledger's own counters); what each column means is held here, in :data:`NOTES`,
beside it. The document's prose (the users' questions and the SQL that answers them, what each
table is for, the metric names, MLflow, the writers) stays hand-written in the document: only the
blocks between a table's markers are generated. tests/test_results_page.py runs each of the
document's SQL queries on a small experiment's store.

    python -m sixblanks.harness.store.schema_doc           # rewrite docs/results-schema.md
    python -m sixblanks.harness.store.schema_doc --check   # exit 1 where it is out of date

tests/test_schema_contract.py fails when the committed document differs from what this writes, and
:func:`column_tables` fails on a column of SCHEMA without a note or a note of no column: a column
added to the store is documented, or the tests say where.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from sixblanks.budgets.counters import COUNTERS, DISCARD_REASONS

from .database import SCHEMA, schema_columns

DOC = Path(__file__).resolve().parents[2] / "docs" / "results-schema.md"

NOTES: dict[str, dict[str, str]] = {
    "experiments": {
        "experiment_id": "the experiment's `name`",
        "name": "same",
        "config": "the fully resolved config (JSON)",
        "warm_start_key": "content hash of the warm-start stage (model, tasks, SFT config, seed)",
        "initial_policy_hash": "hash of the warm-start weights every arm starts from",
        "warm_start_score": "the warm-start policy's held-out score: the mean of the runs' step-0 "
        "evaluations",
        "code_version": "fingerprint of the code that ran the experiment: `CODE_VERSION+<hash>` of "
        "every source file of the four packages and the torch, transformers and vLLM versions "
        "(`harness/version.py`; part of every run id)",
        "ingested_at": "unix time of the last ingest",
    },
    "runs": {
        "run_id": "content hash of the resolved run spec",
        "experiment_id": "→ experiments",
        "arm, preset, task, seed": "what the run is",
        "status": "`finished`, `partial` (killed or still running; completed on resume), `failed`, "
        "`pending`",
        "spec": "the resolved run spec (JSON)",
        "blanks": "the arm's six blanks (JSON)",
        "initial_policy_hash": "hash of the weights it started from",
        "steps": "optimizer-step batches recorded",
        "ended_because": "`budget` (the next batch would not fit) or `max_steps`",
        "error": "the error of a failed run",
        "started_at, updated_at, finished_at": "unix times",
        "final_score": "last held-out evaluation",
        "placement": "where a Ray task ran the run and what it held: node, host, resources, GPU "
        "ids, its GPU share (the run's `placement.json`, harness/orchestration/placement.py); NULL "
        "for local runs",
        "shared_from": "a run copied from another claim's finished run with the same resolved "
        "configuration (`sixblanks findings`): that run's `<claim>/<axis>/runs/<run id>`; its "
        "training is counted in the ledger of the claim that trained it, not here. NULL for a run "
        "trained in this experiment",
    },
    "budgets": {
        "run_id": "→ runs",
        "counter": "a ledger counter with a limit",
        "limit_value": "the matched budget",
        "consumed": "the counter at the end of the run",
    },
    "ledger": {
        "run_id, step": "the step",
        **COUNTERS,  # the ledger's own words (budgets/counters.py)
        ", ".join(f"discarded_{r}" for r in DISCARD_REASONS): "cumulative discarded tokens by "
        "reason: dynamic_sampling, overlong_filter, staleness (past `data.staleness`), masking (an "
        "off-policy gate or a masked truncated-IS form), failed, baseline (ReMax greedy rollouts), "
        "dis (outside SAO's DIS band), unconsumed (rounds a concurrent collector launched that "
        "were never trained on), search_selection (samples a search drew and did not select), "
        "restart (what an attempt killed with no usable checkpoint left had launched: the run "
        "started again, charged it), pair_selection (responses of a DPO arm's scored groups that "
        "are neither the best nor the worst), no_preference (every response of a DPO group whose "
        "rewards are all equal), aborted (partial episodes a streaming collector aborted on new "
        "weights, `partial: regenerate`), stale_inflight / stale_queue (groups past "
        "`data.concurrent.inflight` / `queued`)",
    },
    "metrics": {
        "run_id, step": "the step",
        "name": "the metric (the names below)",
        "value": "its value at that step",
    },
    "evals": {
        "run_id, step": "when (the step after which it ran; step 0 is the warm-start policy)",
        "split": "`test` (what reports score) or `validation` (what the sweep and the ladder "
        "select on); `heldout` in stores of earlier versions",
        "score": "mean outcome reward on the held-out split (pass@1 when rewards are 0/1)",
        "n": "instances",
        "success_rate": "fraction of episodes with reward > 0",
        "launched_tokens, accepted_tokens, device_seconds, verifier_calls": "ledger position at "
        "the evaluation",
        "env_steps, wall_seconds": "ledger position at the evaluation (the report's env-step and "
        "wall-clock axes)",
        "position": "every counter at the evaluation (JSON)",
        "detail": "per-task, per-instance scores (JSON)",
        "eval_generated_tokens, eval_verifier_calls, eval_device_seconds, eval_wall_seconds": (
            "what this evaluation itself cost: tokens and verifier calls of its single samples; "
            "device and wall seconds of the whole evaluation (with `eval.beam`, its beam search "
            "included)"
        ),
        "eval_judge_calls": "judge calls of its single samples (NULL where the task has no judge)",
        "pass_at": 'unbiased pass@k by k (JSON, e.g. `{"1": 0.4, "8": 0.7}`; k = 1 and k = '
        "`eval.samples`)",
        "search_mode, search_score": "with `eval.beam`: the inference-time beam search (`beam "
        "BxE`) and its score, the mean over instances of the best finished leaf's reward (0 where "
        "none finished); NULL without one",
        "search_generated_tokens, search_env_steps, search_verifier_calls": "the beam search's own "
        "compute (every node's tokens once; environment steps including replayed prefixes)",
    },
    "discards": {
        "run_id, step": "the step",
        "reason": "why tokens did not enter a gradient",
        "rollouts, tokens": "discarded in that step for that reason",
    },
    "census": {
        "run_id, step": "the step",
        "rounds": "generation rounds of the step",
        "prompts_sampled, groups_launched, groups_kept": "prompts drawn, groups generated, groups "
        "trained on",
        "groups_varied": "launched groups whose rewards are not all equal (before any filtering)",
        "dropped_all_correct, dropped_all_wrong, dropped_zero_variance, dropped_accuracy, "
        "dropped_surplus": "dropped groups by verdict (every reward 1, every reward 0, all equal "
        "otherwise, mean reward outside `data.accuracy_filter`, beyond the step's quota)",
        "responses_launched, responses_accepted, tokens_launched, tokens_accepted": "samples and "
        "their action tokens, launched and kept",
        "cap_hit": "the round cap (`data.max_sampling_rounds`) ended the step short",
        "skipped_all_correct, skipped_all_wrong": "prompts `data.curriculum` skipped before "
        "launching them, by their recent groups' verdict (never launched: no tokens; 0 without a "
        "curriculum)",
    },
    "selfplay_evals": {
        "run_id, step": "when (the step after which it ran, as in `evals`)",
        "split": "the held-out split the games' instances come from",
        "opponent": "the external opponent (`random`, `optimal`)",
        "games, wins, losses, draws": "games played and their outcomes; a draw is a game left "
        "undecided (cut by a limit, or failed); an illegal move loses",
        "win_rate": "wins / games",
        "winnable": "games a perfect first player wins whatever the opponent does (the ceiling "
        "against `optimal`)",
        "launched_tokens": "ledger position at the evaluation",
        "eval_generated_tokens, eval_verifier_calls, eval_env_steps, eval_device_seconds, "
        "eval_wall_seconds": "what these games cost (counted apart from the training budget, in "
        "the run's evaluation ledger)",
    },
    "fairness": {
        "experiment_id, arm": "the experiment and the arm",
        "item": "initial_policy, tokenizer, task, reward, sampling, limits, global_batch, "
        "optimizer, training_search, evaluation, budget, search_budget, fault, seed_offset, "
        "consumption, or code",
        "flagged": "the arm differs from the experiment's value (seed_offset: recorded, never "
        "flagged), a run consumed < 90% of the matched budget with room left for another step, "
        "or a run was made by other code",
        "reason": "why it is flagged (which keys differ)",
        "value, reference": "the arm's value and the experiment's (JSON): content hashes of the "
        "tokenizer (vocabulary and merges, whole tokenizer, chat template), of the task's class "
        "and verifier source, the task's inputs as each run recorded them (the content of every "
        "data file it reads; the source of each user module it calls: a task class, a verifier, a "
        "judge, and every module they import from the user's tree, at any depth), resolved task "
        "parameters, the reasoning-gym version, every reward-shaping term, sampling, limits, the "
        "global batch (configured, and measured: the prompts whose group reached an update, "
        "optimizer steps per 1000 accepted tokens), the evaluation scaffold, the search budget, a "
        "planted fault (`rewards: shuffle`; the experiment's: none), the seed offset",
        "run_id": "for per-run flags (consumption, code)",
    },
    "inert": {
        "experiment_id, arm": "the experiment and the arm",
        "blank": "the flattened blank field (e.g. `weight.eps_high`)",
        "note": "why it never acted",
    },
    "trials": {
        "experiment_id, arm": "the searched arm",
        "trial": "the Optuna trial number",
        "state": "COMPLETE, PRUNED or FAIL",
        "params": "the suggested parameters by key path (JSON)",
        "value": "the trial's final held-out score (NULL unless COMPLETE)",
        "launched_tokens, device_seconds": "what the trial spent (charged to the arm's search "
        "budget)",
        "pruned_at": "launched tokens when it was pruned",
        "run_id": "reserved",
        "split": "the held-out split the trial was scored on (`validation`)",
    },
    "ladder": {
        "experiment_id, arm": "the debugged arm",
        "rung, rung_name": "1 contract ... 9 asynchrony",
        "variant": "the setting the row is about (`advantage=loo`, `lr=3e-4 (nominal)`, ...); each "
        "rung's last row is its one verdict, variant `verdict`",
        "status": "pass / fail / inconclusive (a rung whose evidence cannot tell the settings "
        "apart is inconclusive, never pass)",
        "evidence": "the sentence that explains the status (the verdict's reason)",
        "ci_low, ci_high": "variant rows: paired bootstrap interval of variant - nominal on the "
        "same instances; the nominal row: of its gain over the warm start (NULL where there is "
        "none)",
        "detail": "the rung's measurements (JSON); `engine` names the rollout engine class that "
        "sampled (HFEngine, VLLMEngine); `split` the held-out split scored (`validation`: the "
        "ladder selects, it never scores test)",
    },
}
"""What each column of each table means: ``{table: {"col" or "col, col, ...": meaning}}``, in the
order the document lists them; columns that share a meaning share a row. Every column of
``SCHEMA`` has exactly one note."""


class SchemaDocError(ValueError):
    pass


def column_table(table: str) -> str:
    """The markdown table of ``table``'s columns: name(s), type(s) from SCHEMA, meaning."""

    types = schema_columns(table)
    notes = NOTES.get(table)
    if notes is None:
        raise SchemaDocError(
            f"table '{table}' of SCHEMA has no NOTES (harness/store/schema_doc.py)"
        )
    seen: list[str] = []
    lines = ["| column | type | meaning |", "|---|---|---|"]
    for key, meaning in notes.items():
        cols = [c.strip() for c in key.split(",")]
        unknown = [c for c in cols if c not in types]
        if unknown:
            raise SchemaDocError(
                f"NOTES['{table}'] names {unknown}, not columns of SCHEMA['{table}']"
            )
        seen += cols
        kinds = [types[c] for c in cols]
        kind = kinds[0] if len(set(kinds)) == 1 else ", ".join(kinds)
        cell = meaning.replace("|", "\\|")  # a pipe inside a cell
        lines.append(f"| {', '.join(cols)} | {kind} | {cell} |")
    twice = sorted({c for c in seen if seen.count(c) > 1})
    missing = [c for c in types if c not in seen]
    if twice or missing:
        raise SchemaDocError(
            f"NOTES['{table}'] (harness/store/schema_doc.py): "
            + "; ".join(
                ([f"no note for {missing}"] if missing else [])
                + ([f"more than one note for {twice}"] if twice else [])
            )
        )
    return "\n".join(lines)


def _begin(table: str) -> str:
    return (
        f"<!-- columns of {table}: generated from SCHEMA and NOTES by "
        "`python -m sixblanks.harness.store.schema_doc` (harness/store/schema_doc.py) -->"
    )


END = "<!-- end of generated columns -->"
_BLOCK = re.compile(r"<!-- columns of (\w+):[^\n]*-->\n.*?" + re.escape(END), re.DOTALL)


def render(text: str) -> str:
    """``text`` (the document) with every table's block of columns generated again. Raises where a
    table of SCHEMA has no block, or a block names no table of SCHEMA."""

    found: list[str] = []

    def block(m: re.Match) -> str:
        table = m.group(1)
        if table not in SCHEMA:
            raise SchemaDocError(f"the document has columns of '{table}', not a table of SCHEMA")
        found.append(table)
        return f"{_begin(table)}\n{column_table(table)}\n{END}"

    out = _BLOCK.sub(block, text)
    missing = [t for t in SCHEMA if t not in found]
    if missing:
        raise SchemaDocError(
            f"the document has no generated columns of {missing}: add, under the table's heading, "
            f"the two lines '<!-- columns of TABLE: -->' and '{END}'"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    current = DOC.read_text()
    new = render(current)
    if "--check" in args:
        if new != current:
            print(f"{DOC} is out of date: run python -m sixblanks.harness.store.schema_doc")
            return 1
        return 0
    if new != current:
        DOC.write_text(new)
        print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
