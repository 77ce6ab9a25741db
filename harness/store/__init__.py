"""The results store: ``database`` is the only writer of ``results.duckdb`` (ingest, rebuild),
``rows`` turns run directories into its rows, ``audit`` is the fairness audit, ``inert`` names the
blanks an arm sets that change nothing."""
