"""Test kits: a fault-injecting server (or proxy), a real llama.cpp server, and a scripted LM.
Never proof that judging works: real models do that."""

from judgetune.testing.fault_server import FAULTS, FaultServer, answer_for
from judgetune.testing.llama_server import LlamaServer
from judgetune.testing.scripted_lm import ScriptedLM

__all__ = ["FAULTS", "FaultServer", "LlamaServer", "ScriptedLM", "answer_for"]
