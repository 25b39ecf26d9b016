"""Test kits: a fault-injecting server (or proxy), real llama.cpp servers, and a scripted LM.
Never proof that judging works: real models do that."""

from judgetune.testing.fault_server import FAULTS, FaultServer, answer_for
from judgetune.testing.llama_server import LlamaCppServer, LlamaServer
from judgetune.testing.scripted_lm import ScriptedLM

__all__ = ["FAULTS", "FaultServer", "LlamaCppServer", "LlamaServer", "ScriptedLM", "answer_for"]
