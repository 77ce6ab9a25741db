"""Where to start: the selection matrix as data, behind ``sixblanks recommend``.

A situation is the answers to :data:`QUESTIONS`. The matrix (:data:`ROWS`) is read top to
bottom and the first row whose conditions hold is the recommendation: a starting preset (a name in
``sixblanks.algorithms.presets.PRESETS``), the blank overrides of the starter arm, why, the main
warning, and the ablation-ladder rung to check first (``harness/studies/ladder/``).
:data:`NOTES` add lines that hold across rows (no demonstrations: no warm start; an answer the
recommended row did not use), :data:`CONFLICTS` refuse situations with nothing to learn from or
with answers that contradict, and :data:`STARTER_TASKS` pick the built-in task of the starter
experiment that ``--write`` produces.

Everything here is data; the functions only match it. Light to import (no torch): the CLI builds
its options from :data:`QUESTIONS`.
"""

from ..studies.ladder.registry import RUNG_NAMES
from .advice import (
    Recommendation,
    check_matrix,
    complete,
    markdown_table,
    match,
    parse_answers,
    reachable_rows,
    recommend,
    starter_mapping,
    starter_yaml,
    write_starter,
)
from .matrix import (
    BASELINE,
    CONFLICTS,
    DEFAULTS,
    MATCHED_UPDATES,
    NOTES,
    QUESTION_BY_NAME,
    QUESTIONS,
    ROW_BY_ID,
    ROWS,
    STARTER_TASKS,
    WARM_START,
    Note,
    Question,
    Row,
    StarterTask,
    When,
    matches,
)

__all__ = [
    "BASELINE",
    "CONFLICTS",
    "DEFAULTS",
    "MATCHED_UPDATES",
    "NOTES",
    "Note",
    "QUESTIONS",
    "QUESTION_BY_NAME",
    "Question",
    "ROWS",
    "ROW_BY_ID",
    "RUNG_NAMES",
    "Recommendation",
    "Row",
    "STARTER_TASKS",
    "StarterTask",
    "WARM_START",
    "When",
    "check_matrix",
    "complete",
    "markdown_table",
    "match",
    "matches",
    "parse_answers",
    "reachable_rows",
    "recommend",
    "starter_mapping",
    "starter_yaml",
    "write_starter",
]
