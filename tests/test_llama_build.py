"""The embedded engine's build: no AMX kernel in the installed llama.cpp (they die with SIGILL on Intel CPUs with
AMX), checked on the library's machine code so that it holds on any CPU; the guard before a model loads."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from judgetune.lm import llama_build
from judgetune.lm._spec import LMSpecError


def test_the_installed_llama_cpp_holds_no_amx_instruction_and_reports_no_amx_path():
    files = llama_build.library_files()
    assert files, "llama-cpp-python's libggml-cpu was not found among its installed files"
    if shutil.which("objdump") is None:
        pytest.skip("objdump (binutils) is not installed")
    assert {str(p): llama_build.amx_instructions(p) for p in files} == {str(p): 0 for p in files}
    features = llama_build.built_features()
    assert features.get("AVX") == "1" or features.get("NEON") == "1" or features  # llama.cpp answered
    assert features.get("AMX_INT8") != "1"
    run = subprocess.run([sys.executable, "-m", "judgetune.lm.llama_build"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "0 AMX instructions" in run.stdout


@pytest.mark.skipif(shutil.which("as") is None or shutil.which("objdump") is None, reason="needs binutils")
def test_the_check_finds_amx_instructions_in_machine_code(tmp_path):
    """The detector is not blind: an object assembled with AMX tile instructions is counted (any x86-64 assembler
    assembles them; nothing runs them)."""
    source = tmp_path / "amx.s"
    source.write_text(".text\nldtilecfg (%rdi)\ntilezero %tmm4\ntileloadd (%rsi,%rdx,1), %tmm0\n"
                      "tdpbssd %tmm2, %tmm1, %tmm0\ntilerelease\nret\n")
    obj = tmp_path / "amx.o"
    made = subprocess.run(["as", "--64", "-o", str(obj), str(source)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"this assembler knows no AMX: {made.stderr.strip()[:200]}")
    assert llama_build.amx_instructions(obj) == 5
    plain = tmp_path / "plain.o"
    (tmp_path / "plain.s").write_text(".text\nvpaddd %zmm0, %zmm1, %zmm2\nret\n")
    subprocess.run(["as", "--64", "-o", str(plain), str(tmp_path / "plain.s")], check=True)
    assert llama_build.amx_instructions(plain) == 0


@pytest.mark.model
def test_an_amx_build_is_refused_on_an_amx_cpu_with_the_command_that_rebuilds_it(monkeypatch, tmp_path):
    monkeypatch.setattr(llama_build, "built_features", lambda: {"AVX2": "1", "AMX_INT8": "1"})
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor : 0\nflags : fpu sse2 avx2 avx512f amx_bf16 amx_tile amx_int8\n")
    read = llama_build.cpu_flags
    monkeypatch.setattr(llama_build, "cpu_flags", lambda: read(cpuinfo))
    problem = llama_build.amx_problem()
    assert problem is not None and "illegal instruction" in problem
    assert "--no-cache-dir --force-reinstall --no-deps llama-cpp-python==" in problem
    assert "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" in problem
    # a CPU without AMX never enters those kernels: no refusal there, but the install check refuses the build
    cpuinfo.write_text("flags : fpu sse2 avx2\n")
    assert llama_build.amx_problem() is None
    assert llama_build.amx_problem(any_cpu=True) is not None
    # the embedded engine says it in one line before llama.cpp would die
    cpuinfo.write_text("flags : amx_tile amx_int8\n")
    from judgetune.lm._llamacpp import LlamaCppModel

    with pytest.raises(LMSpecError, match="built with llama.cpp's AMX paths"):
        LlamaCppModel(tmp_path / "never-read.gguf")


def test_cpu_flags_read_linux_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu amx_tile avx2\n\nprocessor\t: 1\n")
    assert llama_build.cpu_flags(cpuinfo) == {"fpu", "amx_tile", "avx2"}
    assert llama_build.cpu_flags(tmp_path / "absent") == set()
