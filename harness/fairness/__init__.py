"""The fairness audit: what every arm of an experiment holds constant or accounts for, measured per
arm by value or content hash and compared (:mod:`.audit`), the blanks in which arms differ but that
never acted in their runs (:mod:`.inert`), the code tool's items (:mod:`.tools`), and the content
identities they compare by (:mod:`.identity`). It reads specs and run directories and writes
nothing: the orchestrator writes its result (fairness.json) and the store files it."""
