"""Imported by the local workers' fork server alone (:func:`.spawning.worker_context`), before it
forks any worker: the imports every run needs, made once, and Ctrl-C ignored, so that a worker
ignores it from its birth (the server hands its forked children the signal handlers it had once
its imports were made). Ctrl-C reaches the whole process group; the orchestrator alone decides
what it means, and asks a worker to stop its run with SIGTERM."""

import signal

import torch  # noqa: F401
from transformers.models.auto import modeling_auto, tokenization_auto  # noqa: F401
from transformers.models.llama import modeling_llama  # noqa: F401

from ..rollout import backends  # noqa: F401
from ..training import Trainer  # noqa: F401
from . import executors, runner  # noqa: F401

signal.signal(signal.SIGINT, signal.SIG_IGN)
