"""Findings: published claims checked at matched budgets, with seeds added until they are decided.

For each claim (a finding file) and each budget axis it names:

1. the arms must differ in the blanks the claim is about and in nothing else (refused otherwise,
   naming the extra differences);
2. seeds run in batches (a pilot, then ``batch`` more per arm) as an ordinary experiment in
   ``OUT/<claim>/<axis>`` (resumable: finished runs are skipped; a run another claim of the same
   output directory finished with the same configuration is copied in, not trained again); each
   batch's worst case is reserved on the axis's ledger before launch;
3. after each batch the group-sequential test (``reports.sequential``) looks at one value per seed
   and arm for every comparison the claim implies (two arms: one; k arms: best against each other,
   or each adjacent pair of an ordering; an interaction: the change of the difference between two
   budgets, or its side at each); it stops when all are decided or the seed cap is reached;
4. the verdict: five directional verdicts against the smallest effect, the margin rules of equal
   and no-worse claims, a combined verdict for a claim of several comparisons (Holm inside it).

Each claim writes ``OUT/<claim>/verdict.json``; ``adjust`` judges the family of claims run
together; ``reports.findings`` renders them all.
"""

from .amended import under
from .claim import (
    SUMMARIES,
    check_criterion,
    checked_finding,
    comparisons,
    recorded_summary,
    run_finding,
    shared_runs,
    summary,
)
from .family import adjust, members
from .forms import NotMeasured, form_of, implied_by, judge_inside, toward
from .looks import implied, run_looks
from .records import combine
from .runs import (
    aggregate,
    arm_settings,
    audit_flags,
    experiment_mapping,
    finding_files,
    per_seed_values,
    start_scores,
    undeclared_differences,
)
from .shared import adopt_shared, adopt_specs, finished_runs, run_identity
from .verdicts import (
    ADJUSTMENTS,
    COMBINED_RULE,
    DECIDED,
    MARGIN,
    MARGIN_RULES,
    MOST_SEEDS_AUTO,
    RULES,
    SIGN_CHANGE_RULE,
    adjusted_p,
    at_level,
    claim_verdict,
    combined_verdict,
    design_of,
    design_record,
    detectable,
    holm_levels,
    judge,
    seed_design,
    sign_change_verdict,
)

__all__ = [
    "ADJUSTMENTS",
    "COMBINED_RULE",
    "DECIDED",
    "MARGIN",
    "MARGIN_RULES",
    "MOST_SEEDS_AUTO",
    "NotMeasured",
    "RULES",
    "SIGN_CHANGE_RULE",
    "SUMMARIES",
    "adjust",
    "adjusted_p",
    "adopt_shared",
    "adopt_specs",
    "aggregate",
    "arm_settings",
    "at_level",
    "audit_flags",
    "check_criterion",
    "checked_finding",
    "claim_verdict",
    "combine",
    "combined_verdict",
    "comparisons",
    "design_of",
    "design_record",
    "detectable",
    "experiment_mapping",
    "finding_files",
    "finished_runs",
    "form_of",
    "holm_levels",
    "implied",
    "implied_by",
    "judge",
    "judge_inside",
    "members",
    "per_seed_values",
    "recorded_summary",
    "run_finding",
    "run_identity",
    "run_looks",
    "seed_design",
    "shared_runs",
    "sign_change_verdict",
    "start_scores",
    "summary",
    "toward",
    "undeclared_differences",
    "under",
]
