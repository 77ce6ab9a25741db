"""The ablation ladder: debug a failing arm one axis at a time, in order.

    1 contract         masks, behavior vs recomputed log-probs, ratio 1 on-policy, rewards,
                       groups, turns
    2 frozen_batch     the arm's own update (policy gradient; a critic's policy and value losses;
                       DPO on its pairs; SFT) on a frozen batch stored to disk: twice, and across
                       micro-batch splits -> same losses, same gradients
    3 no_update_eval   the initial policy evaluated repeatedly (same seeds, new engine version)
                       -> same score on every instance
    4 curriculum       difficulty distribution; trainable-group fraction at the start and over a
                       short run
    5 advantage        advantage estimator varied, everything else fixed
    6 normalization    loss normalization varied, each Z as is and scale-matched (its gradient-norm
                       clip rescaled by its total loss weight over the arm's): bias vs step size
    7 clip_kl_lr       clipping (on the ratio's own scale; SAPO: its temperatures), KL and learning
                       rate varied (gradient norms reported)
    8 credit           one form of credit added by the advantage blank alone (a turn critic, a
                       PRM, GiGPO)
    9 asynchrony       the arm's lag (data.lag or data.concurrent) against its synchronous setting;
                       fails when asynchrony loses

Each rung is a small experiment under the same ledger machinery (a budget per rung). It gives rows
(one per setting it tried) and exactly one verdict row (``variant == "verdict"``: pass, fail or
inconclusive with a short reason); the ladder stops at the first failing verdict unless
``all_rungs``. A rung passes only on evidence that could have failed it
(:mod:`sixblanks.harness.studies.ladder.stats`).
Every evaluation the ladder makes, its own and its short runs', scores the VALIDATION split: the
ladder selects settings, and selection never sees the test instances reports show. Variants are
compared to the arm's nominal setting by a paired bootstrap over the same validation instances, so
one seed already gives an interval.

The package: the rungs in a registry (``registry``: number, name and function of each), each rung a
function of a :class:`RungContext` (``context``) in a module of its own or of its kind (``checks``
for rungs 1-3, with their work in ``contract``, ``frozen_batch`` and ``no_update``;
``curriculum``; ``one_axis`` for 5, 7 and 8; ``normalization``; ``asynchrony``); the short runs
the comparing rungs train (``short_runs``), each one's result a :class:`ShortRun` (``short_run``);
the rows a rung gives (``rows``) and the statistics that judge them (``stats``); the walk
(``walk``: :class:`Ladder`).
"""

from .context import RungContext
from .registry import RUNG_NAMES, RUNGS, Rung
from .rows import SPLIT, VERDICT, RungResult, first_failure, verdicts
from .short_run import ShortRun
from .walk import Ladder, LadderFailed

__all__ = [
    "RUNGS",
    "RUNG_NAMES",
    "SPLIT",
    "VERDICT",
    "Ladder",
    "LadderFailed",
    "Rung",
    "RungContext",
    "RungResult",
    "ShortRun",
    "first_failure",
    "verdicts",
]
