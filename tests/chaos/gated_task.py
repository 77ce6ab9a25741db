"""A task that holds its runs in place while a file the test controls exists: once a run has made
``after`` verifier calls, each further call waits for the file to go (or for the run to be asked to
stop, as Ctrl-C asks it), so no run can finish however fast it trains, and an interrupt aimed at
runs in flight finds them in flight on a loaded machine as on an idle one. Only a run's own calls
count and hold (a worker executing a run past its setup): the warm start's demonstrations, which
the verifier checks too, go through."""

import os
import time

from pydantic import Field

from sixblanks.harness import stopping
from sixblanks.harness.tasks.builtin import Arithmetic, ArithmeticParams


class GatedParams(ArithmeticParams):
    hold: str = Field("", description="The file whose existence holds the run ('' holds none).")
    after: int = Field(0, ge=0, description="Verifier calls a run makes before the hold applies.")


class GatedArithmetic(Arithmetic):
    name = "gated_arithmetic"
    Params = GatedParams
    params: GatedParams

    def __init__(self, params=None):
        super().__init__(params)
        self.calls = 0  # a task per run (and per process): the run's own count

    def verify(self, instance, response):
        if not stopping.ACTIVE.is_set():  # not a run: the warm start, a run's setup
            return super().verify(instance, response)
        self.calls += 1
        p = self.params
        while (
            p.hold
            and self.calls > p.after
            and os.path.exists(p.hold)
            and not stopping.STOP.is_set()  # a stop request lets the step reach its boundary
        ):
            time.sleep(0.02)
        return super().verify(instance, response)
