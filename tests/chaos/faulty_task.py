"""A task whose verifier misbehaves on a fixed share of samples: it raises, returns NaN, or hangs
past the task's verifier timeout. Each fault is recorded (in this process) so that a test can
compare the ledger's failure accounting with what was injected."""

import time
import zlib

from sixblanks.harness.tasks.builtin import Arithmetic

INJECTED: list[str] = []
"""The faults injected, in call order, by kind: "raised", "non_finite", "timeout"."""


class FaultyArithmetic(Arithmetic):
    name = "faulty_arithmetic"
    verifier_timeout_s = 0.25

    def verify(self, instance, response):
        kind = zlib.crc32(f"{instance.seed}|{response}|{len(INJECTED)}".encode()) % 10
        if kind == 0:
            INJECTED.append("raised")
            raise RuntimeError("the verifier's sandbox crashed")
        if kind == 1:
            INJECTED.append("non_finite")
            return float("nan")
        if kind == 2:
            INJECTED.append("timeout")
            time.sleep(0.6)  # abandoned by the gate after 0.25 s; this thread then ends
            return 1.0
        return super().verify(instance, response)
