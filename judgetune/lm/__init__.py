"""LMs: specs, the embedded engine (llama.cpp, transformers), OpenAI-compatible servers, label
distributions, target-text log-probabilities and the on-disk cache."""

from judgetune._endpoints import TRUST_ENV, EndpointError, check_endpoint, is_trusted, same_endpoint
from judgetune.lm._adapter import PrefillChatAdapter
from judgetune.lm._assembled import ASSEMBLED_MODELS, AssembledModel, assemble, assembled_path, models_dir
from judgetune.lm._batch import Outcome, run_items
from judgetune.lm._cache import ResponseCache, default_cache_dir
from judgetune.lm._labels import LabelDistribution
from judgetune.lm._lm import Generation, JudgeLM, load_lm
from judgetune.lm._modes import SCORING_MODES, LogprobsUnavailableError, logprobs_unavailable, resolve_scoring_mode
from judgetune.lm._position import LABEL_POSITIONS, LabelPositionError
from judgetune.lm._record import run_record
from judgetune.lm._remote import (
                                  Completion,
                                  LMCallError,
                                  OpenAICompatibleClient,
                                  ServerAuthError,
                                  ServerError,
                                  ServerUnreachableError,
                                  classify,
)
from judgetune.lm._spec import LMSpec, LMSpecError, embedded_threads, parse_lm_spec
from judgetune.lm._targets import TargetLogprobs

__all__ = ["ASSEMBLED_MODELS", "LABEL_POSITIONS", "LabelPositionError",
           "AssembledModel", "assemble", "assembled_path", "models_dir",
           "SCORING_MODES", "TRUST_ENV", "Completion", "EndpointError",
           "Generation", "JudgeLM", "LMCallError", "LMSpec", "LMSpecError",
           "LabelDistribution", "LogprobsUnavailableError", "OpenAICompatibleClient", "Outcome", "PrefillChatAdapter",
           "ResponseCache", "TargetLogprobs", "default_cache_dir", "embedded_threads", "load_lm",
           "logprobs_unavailable", "parse_lm_spec", "resolve_scoring_mode", "run_items", "run_record", "ServerAuthError",
           "ServerError", "ServerUnreachableError", "check_endpoint", "classify", "is_trusted",
           "same_endpoint"]
