"""The version of the code that runs experiments.

It is part of every run spec, so of every run id: a change here never passes old results off as
new. It also tags MLflow runs and versions the environments in the fairness audit.
"""

CODE_VERSION = "sixblanks-0.1"
