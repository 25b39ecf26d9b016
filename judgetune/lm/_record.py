"""The run record of a judge.json: the engine an LM ran on, and the machine."""

from __future__ import annotations

import platform
from importlib import metadata
from typing import Any

__all__ = ["run_record"]


def run_record(lm: Any) -> dict[str, Any]:
    """What reproducing a judge's figures needs besides its settings: the engine of ``lm`` (the judge's LM,
    None for a judge without one) and how it ran (threads, items decoded side by side), package versions and
    the machine."""
    out: dict[str, Any] = {"machine": platform.machine(), "python": platform.python_version()}
    if lm is None:
        return {"engine": None, **out}
    model = getattr(lm, "model", None)
    engine = getattr(model, "backend", None) if model is not None else "server"
    try:
        llama = metadata.version("llama_cpp_python")
    except metadata.PackageNotFoundError:
        llama = None
    record = {"engine": engine, "model_id": getattr(lm, "model_id", None), "threads": getattr(model, "n_threads", None),
              "batch_size": getattr(lm, "batch_size", None), "llama_cpp_python": llama, **out}
    if engine == "llamacpp":  # the CPU code paths llama.cpp was built with (its results differ between them)
        try:
            import llama_cpp

            record["cpu_features"] = llama_cpp.llama_print_system_info().decode().strip(" |")
        except (ImportError, AttributeError):
            record["cpu_features"] = None
    return record
