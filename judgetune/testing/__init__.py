"""Test kits: a fault-injecting server and a scripted LM. Never proof that judging works: real models do that."""

from judgetune.testing.fault_server import FAULTS, FaultServer, answer_for
from judgetune.testing.scripted_lm import ScriptedLM

__all__ = ["FAULTS", "FaultServer", "ScriptedLM", "answer_for"]
