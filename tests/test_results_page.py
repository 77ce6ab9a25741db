"""The results-store page (docs/results-schema.md) answers a user's questions first, with SQL that
runs: every ```sql block of the page is run on a small experiment's ``results.duckdb`` and gives
rows with the columns its ``-- returns:`` line names; the score-against-tokens queries average over
runs (fewer rows than the evaluations, each the mean of its runs' scores)."""

from __future__ import annotations

import math
import re
from collections import defaultdict

import duckdb
import pytest

from sixblanks.harness.config import validate_mapping
from sixblanks.harness.orchestration.orchestrator import Orchestrator
from sixblanks.harness.store.schema_doc import DOC

pytestmark = pytest.mark.xdist_group("results_page")

# two arms x two seeds; DAPO's dynamic sampling discards, GRPO's does not; several evaluations
TINY = {
    "name": "page",
    "task": {"name": "arithmetic", "eval_size": 16},
    "rollout": {"max_new_tokens": 6, "prompts_per_step": 4, "group_size": 4},
    "warm_start": {"steps": 40, "num_demos": 300},
    "budget": {"launched_tokens": 900},
    "eval": {"every": 200},
    "seeds": [0, 1],
    "arms": {"grpo": {"preset": "grpo"}, "dapo": {"preset": "dapo"}},
    "tracking": {"mlflow": False},
}


def queries(text: str) -> dict[str, tuple[list[str], bool, str]]:
    """The page's SQL blocks by their ``-- returns:`` line: ``{returns line: (columns, open, sql)}``
    (``open``: the line ends with ``...``, the columns named are the first of more)."""

    out = {}
    for sql in re.findall(r"^```sql\n(.*?)^```", text, flags=re.S | re.M):
        first = sql.splitlines()[0]
        m = re.fullmatch(r"-- returns: (.*)", first)
        assert m, f"a SQL block of {DOC.name} opens without its '-- returns:' line:\n{sql}"
        cols = [c.strip() for c in m.group(1).split(",")]
        more = cols[-1] == "..."
        out[m.group(1)] = ([c for c in cols if c != "..."], more, sql)
    return out


PAGE = DOC.read_text(encoding="utf-8")
QUERIES = queries(PAGE)


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    out = tmp_path_factory.mktemp("page")
    Orchestrator(validate_mapping(TINY), out, progress=False).run()
    c = duckdb.connect(str(out / "results.duckdb"), read_only=True)
    yield c
    c.close()


def _run(con, returns: str) -> list[dict]:
    sql = QUERIES[returns][2]
    rel = con.sql(sql)
    return [dict(zip(rel.columns, row)) for row in rel.fetchall()]


def test_the_page_opens_with_the_questions_and_ends_with_the_writers():
    headings = re.findall(r"^(#{1,3}) (.+)$", PAGE, flags=re.M)
    h2 = [title for level, title in headings if level == "##"]
    assert h2[0].startswith("Questions"), h2
    assert h2.index("Tables") < h2.index("Writing and reading the file") == len(h2) - 1
    questions = PAGE.split("\n## Questions", 1)[1].split("\n## Tables", 1)[0]
    for asked in (
        "Which arm scored best at the end, with how many seeds",
        "Score against launched tokens, per arm",
        "What each arm discarded, and why",
        "How much each run spent of each budget counter",
        "The evaluation curve of one run",
    ):
        assert f"\n### {asked}\n" in questions, asked
    # the writers' internals are no longer above the questions
    assert "StoreBusy" not in PAGE.split("\n## Questions", 1)[0]
    assert PAGE.index("`ingest(out_dir") > PAGE.index("\n## Tables")
    assert len(QUERIES) >= 8
    # each query fits the page's code block without a sideways scroll (about 88 characters)
    long = [line for _, _, sql in QUERIES.values() for line in sql.splitlines() if len(line) > 80]
    assert not long, long


@pytest.mark.parametrize("returns", list(QUERIES))
def test_every_query_of_the_page_runs_and_gives_the_columns_it_names(con, returns):
    cols, more, sql = QUERIES[returns]
    rel = con.sql(sql)
    got = rel.columns
    if more:
        assert got[: len(cols)] == cols and len(got) > len(cols), got
    else:
        assert got == cols
    rows = rel.fetchall()
    assert rows, f"no rows from:\n{sql}"
    # no column is NULL in every row (a misspelt name or a join that matched nothing)
    for i, name in enumerate(got):
        if name not in ("sd", "error", "reason"):
            assert any(r[i] is not None for r in rows), name


def _test_evals(con) -> list[tuple]:
    return con.execute(
        "SELECT r.arm, e.run_id, e.launched_tokens, e.score FROM evals e JOIN runs r "
        "USING (run_id) WHERE e.split = 'test'"
    ).fetchall()


def test_score_against_tokens_in_bins_averages_over_the_runs(con):
    rows = _run(con, "arm, task, tokens_up_to, runs, mean_score")
    raw = _test_evals(con)
    assert len(rows) < len(raw)  # grouped, not one row per evaluation
    assert any(r["runs"] >= 2 for r in rows) and all(r["runs"] <= 2 for r in rows)
    # by hand: 10 equal bins up to the largest launched tokens of any evaluation
    w = max(t for _, _, t, _ in raw) / 10
    per_run = defaultdict(list)
    for arm, rid, tokens, score in raw:
        per_run[arm, round(min(math.ceil(tokens / w), 10) * w), rid].append(score)
    by_bin = defaultdict(list)
    for (arm, edge, _), scores in per_run.items():
        by_bin[arm, edge].append(sum(scores) / len(scores))
    assert {(r["arm"], r["tokens_up_to"]) for r in rows} == set(by_bin)
    for r in rows:
        runs = by_bin[r["arm"], r["tokens_up_to"]]
        assert r["runs"] == len(runs)
        assert r["mean_score"] == pytest.approx(sum(runs) / len(runs))
    # the warm start's bin (0 tokens) holds every run
    assert all(r["runs"] == 2 for r in rows if r["tokens_up_to"] == 0)


def test_score_at_matched_budget_points_is_each_runs_latest_evaluation(con):
    rows = _run(con, "arm, task, budget_share, tokens, runs, mean_score")
    raw = _test_evals(con)
    assert len(rows) == 2 * 4 < len(raw)  # two arms at four points, each over both seeds
    for r in rows:
        assert r["runs"] == 2 and r["tokens"] == pytest.approx(900 * r["budget_share"])
        latest = {}
        for arm, rid, tokens, score in sorted(raw, key=lambda e: e[2]):
            if arm == r["arm"] and tokens <= r["tokens"]:
                latest[rid] = score
        assert len(latest) == 2
        assert r["mean_score"] == pytest.approx(sum(latest.values()) / 2)


def test_best_arm_discards_budgets_and_curve(con):
    best = _run(con, "arm, task, seeds, mean_score, sd, worst, best")
    finals = defaultdict(list)
    for arm, score in con.execute("SELECT arm, final_score FROM runs").fetchall():
        finals[arm].append(score)
    assert [r["arm"] for r in best] == sorted(finals, key=lambda a: -sum(finals[a]))
    for r in best:
        assert r["seeds"] == 2
        assert r["mean_score"] == pytest.approx(sum(finals[r["arm"]]) / 2)
        assert r["worst"] <= r["mean_score"] <= r["best"]

    discards = _run(con, "arm, reason, runs, rollouts, tokens, share_of_launched")
    assert {r["arm"] for r in discards} == {"dapo"}  # GRPO discards nothing
    ds = next(r for r in discards if r["reason"] == "dynamic_sampling")
    # the per-step discards add up to the ledger's cumulative counter at the runs' ends
    discarded, launched = con.execute(
        "SELECT sum(discarded_dynamic_sampling), sum(launched_tokens) FROM ("
        "  SELECT l.* FROM ledger l JOIN runs r USING (run_id) WHERE r.arm = 'dapo'"
        "  QUALIFY row_number() OVER (PARTITION BY l.run_id ORDER BY l.step DESC) = 1)"
    ).fetchall()[0]
    assert ds["runs"] == 2 and ds["tokens"] == pytest.approx(discarded) and discarded > 0
    assert ds["share_of_launched"] == pytest.approx(discarded / launched)

    spent = _run(con, "arm, task, seed, counter, consumed, limit_value, spent_share")
    assert len(spent) == 4 and {r["counter"] for r in spent} == {"launched_tokens"}
    assert all(0.5 < r["spent_share"] <= 1 and r["limit_value"] == 900 for r in spent)
    ends = _run(con, "arm, task, seed, step, prompt_tokens, launched_tokens, ...")
    assert sorted(r["launched_tokens"] for r in ends) == sorted(r["consumed"] for r in spent)

    curve = _run(con, "step, launched_tokens, score, success_rate, n")
    assert curve[0]["step"] == 0 and curve[0]["launched_tokens"] == 0 and len(curve) >= 3
    assert [r["step"] for r in curve] == sorted(r["step"] for r in curve)
