"""The version of the code that runs experiments.

It is part of every run spec, so of every run id: a change here never passes old results off as
new. It also tags MLflow runs and versions the environments in the fairness audit.
"""

CODE_VERSION = "sixblanks-0.2"
"""0.2: the training loop split into collectors and objectives (same numbers; new checkpoint format,
so unfinished 0.1 runs start afresh rather than resume from a checkpoint they cannot read)."""
