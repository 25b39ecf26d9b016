"""The embedded engine's build: no AMX kernel in the installed llama.cpp (they die with SIGILL on Intel CPUs with
AMX), checked on the library's machine code so that it holds on any CPU; the guard before a model loads."""

from __future__ import annotations

import os
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
    assert features.get("AVX") == "1" or features.get("NEON") == "1", features  # llama.cpp named its SIMD paths
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
    assert llama_build.amx_instructions(obj) == llama_build.amx_encodings(obj) == 5
    plain = tmp_path / "plain.o"
    (tmp_path / "plain.s").write_text(".text\nvpaddd %zmm0, %zmm1, %zmm2\nret\n")
    subprocess.run(["as", "--64", "-o", str(plain), str(tmp_path / "plain.s")], check=True)
    assert llama_build.amx_instructions(plain) == llama_build.amx_encodings(plain) == 0


# every AMX instruction (objdump names each), encoded as `as --64` encodes it
AMX_CODE = bytes.fromhex("c4e2784907 c4e27b49e0 c4e27b4b0416 c4e26b5ec1 c4e27849c0 c4e279494008 c4e2794b1c96 "
                         "c4e27a4b0c0f c4e26a5ec1 c4e2415eee c4e2685ec1 c4e26a5cc1 c4e26b5cc1 c4c2784945 40 "
                         "c4827b4b745140")
# VEX instructions of the same map and opcodes that are not AMX (W1, L1, a register where memory goes), and others
NOT_AMX = bytes.fromhex("c4e2f84907 c4e27c4907 c4e27849c8 c4e27b4b07 c4e2795e07 c4e2795cc1 62f27d48 c5f877 0f05 c3")


def _elf(code: bytes, machine: int = 62) -> bytes:
    """A minimal 64-bit ELF file whose one section, executable, holds ``code``."""
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    header[0x12:0x14] = machine.to_bytes(2, "little")
    header[0x28:0x30] = (64 + len(code)).to_bytes(8, "little")  # the section headers follow the code
    header[0x3A:0x3C], header[0x3C:0x3E] = (64).to_bytes(2, "little"), (2).to_bytes(2, "little")
    text = bytearray(64)
    text[4:8], text[8:16] = (1).to_bytes(4, "little"), (0x6).to_bytes(8, "little")  # PROGBITS, ALLOC|EXECINSTR
    text[24:32], text[32:40] = (64).to_bytes(8, "little"), len(code).to_bytes(8, "little")
    return bytes(header) + code + bytes(64) + bytes(text)


def test_the_scan_without_objdump_counts_every_amx_encoding_and_nothing_else(tmp_path):
    """``amx_encodings`` reads an x86-64 ELF file's executable sections without a disassembler: each of the 15 AMX
    instructions above is counted, the look-alikes are not, data outside the code is not read, and another
    machine's code (where AMX cannot be) counts nothing. A file that is no ELF file cannot be read this way."""
    path = tmp_path / "lib.so"
    path.write_bytes(_elf(AMX_CODE + NOT_AMX))
    assert llama_build.amx_encodings(path) == 15
    path.write_bytes(_elf(NOT_AMX))
    assert llama_build.amx_encodings(path) == 0
    path.write_bytes(_elf(NOT_AMX, machine=183) + AMX_CODE)  # AArch64; AMX bytes outside any section
    assert llama_build.amx_encodings(path) == 0
    path.write_bytes(b"\xcf\xfa\xed\xfe" + AMX_CODE)  # a Mach-O header
    with pytest.raises(ValueError, match="not a 64-bit little-endian ELF file"):
        llama_build.amx_encodings(path)


def _no_objdump_path(tmp_path) -> str:
    """A PATH without objdump (the check runs with sys.executable by its full path)."""
    empty = tmp_path / "bin"
    empty.mkdir()
    return str(empty)


def test_without_objdump_the_check_says_so_on_stderr_and_scans_the_machine_code(tmp_path):
    """install.sh discards the check's stdout: that objdump is missing is said on stderr, and the installed libraries'
    machine code is still checked (scanned in Python), so the check does not pass on llama.cpp's flags alone."""
    files = llama_build.library_files()
    assert files, "llama-cpp-python's libggml-cpu was not found among its installed files"
    run = subprocess.run([sys.executable, "-m", "judgetune.lm.llama_build"], capture_output=True, text=True,
                         env={**os.environ, "PATH": _no_objdump_path(tmp_path)})
    assert run.returncode == 0, run.stderr
    assert "objdump (binutils) not found" in run.stderr and "objdump" not in run.stdout.replace(
        "scanned without objdump", "")
    assert run.stdout.count(": 0 AMX instructions (scanned without objdump)") == len(files)


def test_without_objdump_amx_code_or_an_unreadable_library_fails_closed(tmp_path, monkeypatch, capsys):
    """Without objdump, a library whose code holds AMX encodings fails the check with the rebuild command, and one
    that is no ELF file fails it with one line saying to install binutils (nothing passes unread)."""
    monkeypatch.setenv("PATH", _no_objdump_path(tmp_path))
    monkeypatch.setattr(llama_build, "built_features", lambda: {"AVX2": "1"})
    amx = tmp_path / "libggml-cpu.so"
    amx.write_bytes(_elf(AMX_CODE))
    monkeypatch.setattr(llama_build, "library_files", lambda: [amx])
    assert llama_build.main() == 1
    err = capsys.readouterr().err
    assert "libggml-cpu.so holds 15 AMX instructions; rebuild it: " in err and "--force-reinstall" in err
    amx.write_bytes(b"\xcf\xfa\xed\xfe" + AMX_CODE)
    assert llama_build.main() == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1].endswith("cannot be read without objdump; install binutils (objdump) and run python "
                                         "-m judgetune.lm.llama_build again")


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
