"""From an experiment file to runs on disk: its preparation (``plan``: the warm start and the run
specs), the runs' orchestration (``orchestrator``), executors on this machine or a Ray cluster
(``executors``, ``ray_executor``, ``placement``), one run in a worker (``runner``), the shared warm
start (``warmstart``), services (``servers``, ``tracking``), and the output directory's lock,
definition, processes and ledger log (``outlock``, ``definition``, ``processes``, ``ledgerlog``)."""
