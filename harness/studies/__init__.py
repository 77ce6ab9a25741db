"""Experiments about experiments: the ablation ladder (``ladder``, a package: one axis at a time,
its rungs in a registry, its statistics in ``ladder.stats``) and the hyperparameter search
(``sweep``: the study and its confirmation runs; ``sweep_trials``: trials under the fixed search
budget; ``sweep_worker``: the study's storage and one trial in a worker)."""
