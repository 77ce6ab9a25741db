"""A planted fault for the ablation ladder: a task whose reward drifts between calls
(like an environment whose version or hidden state changes under a fixed seed)."""

from sixblanks.harness.tasks.builtin import Arithmetic

CALLS = {"n": 0}


class DriftingArithmetic(Arithmetic):
    name = "drifting_arithmetic"

    def verify(self, instance, response):
        CALLS["n"] += 1
        correct = super().verify(instance, response)
        # every other block of 37 calls the verifier flips: same policy, same seeds, other scores
        return 1.0 - correct if (CALLS["n"] // 37) % 2 else correct
