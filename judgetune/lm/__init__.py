"""LMs: specs, the embedded engine (llama.cpp, transformers), OpenAI-compatible servers, label
distributions, target-text log-probabilities and the on-disk cache."""

from judgetune.lm._adapter import PrefillChatAdapter
from judgetune.lm._batch import Outcome, run_items
from judgetune.lm._cache import ResponseCache, default_cache_dir
from judgetune.lm._labels import LabelDistribution, LogprobsUnavailableError
from judgetune.lm._lm import Generation, JudgeLM, load_lm
from judgetune.lm._remote import Completion, LMCallError, OpenAICompatibleClient
from judgetune.lm._spec import LMSpec, LMSpecError, parse_lm_spec
from judgetune.lm._targets import TargetLogprobs

__all__ = ["Completion", "Generation", "JudgeLM", "LMCallError", "LMSpec", "LMSpecError", "LabelDistribution",
           "LogprobsUnavailableError", "OpenAICompatibleClient", "Outcome", "PrefillChatAdapter", "ResponseCache",
           "TargetLogprobs", "load_lm",
           "default_cache_dir", "parse_lm_spec", "run_items"]
