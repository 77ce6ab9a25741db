"""The results schema is stated once, in the store's ``SCHEMA`` (harness/store/database.py): the
columns the reports read are in it with a compatible type, the reports' SQL binds on a store made
from it, and docs/results-schema.md's column tables are what harness/store/schema_doc.py generates
from it (reports/ imports nothing of harness/, so the check lives here)."""

from pathlib import Path

import pytest

from sixblanks.harness.store.database import SCHEMA, append_rows, schema_columns
from sixblanks.harness.store.schema_doc import DOC, NOTES, SchemaDocError, column_table, render
from sixblanks.reports import data as report_data

READ = {
    "runs": report_data.RUNS,
    "evals": report_data.EVALS,
    "census": report_data.CENSUS,
    "fairness": report_data.FAIRNESS,
    "inert": report_data.INERT,
    "trials": report_data.TRIALS,
    "ladder": report_data.LADDER,
}
"""The columns reports/data.py reads each table with (``read_table``: a missing one reads as NULL,
so only this test notices a column the store never writes)."""

COMPATIBLE = {("VARCHAR", "JSON")}
"""(read as, stored as) pairs that read right besides equal types: JSON is text."""


def test_every_column_the_reports_read_is_in_the_store_with_a_compatible_type():
    from sixblanks.reports.selfplay import COLUMNS as SELFPLAY

    problems = []
    for table, columns in [*READ.items(), ("selfplay_evals", dict.fromkeys(SELFPLAY))]:
        have = schema_columns(table)
        for col, want in columns.items():
            if col not in have:
                problems.append(f"reports read {table}.{col}, which SCHEMA['{table}'] lacks")
            elif want is not None and want != have[col] and (want, have[col]) not in COMPATIBLE:
                problems.append(f"reports read {table}.{col} as {want}; the store has {have[col]}")
    assert not problems, "\n".join(problems)


def test_the_reports_queries_bind_on_a_store_of_the_schema(tmp_path):
    """Every query the report runs (reports/build.py's and each ``query(con)``) on a store that
    holds the schema and rows enough to reach each query: a column its SQL names that the store
    lacks is a DuckDB binder error."""

    from sixblanks.reports.build import load

    append_rows(
        tmp_path,
        {
            "experiments": [{"experiment_id": "e", "name": "e", "config": '{"arms": {}}'}],
            # a world model's held-out metric: its report section queries the ledger then
            "metrics": [
                {"run_id": "r", "step": 0, "name": "world_model.heldout_obs_nll", "value": 1.0}
            ],
        },
    )
    d = load(tmp_path)
    assert d.name == "e" and d.runs.height == 0


def test_the_schema_doc_is_generated_from_the_schema():
    text = DOC.read_text()
    assert render(text) == text, (
        f"{DOC} differs from what SCHEMA and NOTES make: run python -m "
        "sixblanks.harness.store.schema_doc (and commit the result)"
    )
    assert Path(DOC).resolve() == Path(__file__).resolve().parents[1] / "docs" / "results-schema.md"
    # every column, by name and type, in its table's block
    for table in SCHEMA:
        assert column_table(table) in text, table


def test_a_column_without_a_note_or_a_note_without_a_column_is_named(monkeypatch):
    notes = dict(NOTES["budgets"])
    del notes["consumed"]
    monkeypatch.setitem(NOTES, "budgets", notes)
    with pytest.raises(SchemaDocError, match=r"NOTES\['budgets'\].*no note for \['consumed'\]"):
        column_table("budgets")
    monkeypatch.setitem(NOTES, "budgets", {**NOTES["budgets"], "consumed, spent": "x"})
    with pytest.raises(SchemaDocError, match=r"names \['spent'\], not columns"):
        column_table("budgets")
    monkeypatch.undo()
    monkeypatch.setitem(SCHEMA, "new_table", "run_id VARCHAR")  # a table the page lacks
    with pytest.raises(SchemaDocError, match="no generated columns of \\['new_table'\\]"):
        render(DOC.read_text())
