"""Other frameworks' configurations read as sixblanks arms (``sixblanks translate``): a TRL
``GRPOConfig`` or a verl actor/algorithm configuration becomes a preset with blank, rollout and
optimizer overrides.

A field absent from the input takes that framework's documented default, so the translation shows
what the defaults imply; every field with no sixblanks equivalent is named with the reason, fields
the reader does not know are reported as unknown, and the framework's known traps are listed with
whether the given configuration triggers them. No torch here (the blanks and presets it resolves
are pydantic data). The defaults are those of huggingface/trl@f2cd577 (2026-07-24, with
transformers 5.24's ``TrainingArguments``) and verl-project/verl@1dda039 (2026-08-22); the comments
cite the file and line each one is read from.

The modules, by what they read: ``fields`` (a file as fields, with defaults behind them),
``builder`` and ``closest`` (what a configuration determines, the closest preset), ``result`` (the
translation and its renderings), ``traps`` (the traps both frameworks have), and per framework
``*_fields`` (its defaults and field tables), the blanks (``trl``, ``verl``, ``verl_correction``),
``*_settings`` (rollout, optimizer, the experiment's settings) and ``*_traps``; ``frameworks``
ties them together.
"""

from .fields import FRAMEWORKS, SOURCES, parse_fields, read_fields
from .frameworks import translate, translate_file
from .result import Translation
from .traps import Trap
from .trl_fields import TRL_DEFAULTS, TRL_OTHER_FIELDS
from .verl_fields import VERL_DEFAULTS, VERL_OTHER

__all__ = [
    "FRAMEWORKS",
    "SOURCES",
    "TRL_DEFAULTS",
    "TRL_OTHER_FIELDS",
    "VERL_DEFAULTS",
    "VERL_OTHER",
    "Trap",
    "Translation",
    "parse_fields",
    "read_fields",
    "translate",
    "translate_file",
]
