"""Which CPU code paths the installed llama.cpp was built with, and whether they can run on this CPU.

llama-cpp-python has no Linux wheel on PyPI: pip compiles llama.cpp on the user's machine, for that
machine's CPU (``-march=native``). On an Intel CPU with AMX (Sapphire Rapids and later) that native build
compiles llama.cpp's AMX matrix kernels, whose worker threads run tile instructions without the
per-thread permission Linux requires, and the process dies with an illegal instruction (SIGILL) in its
first LM call. judgetune's install builds without AMX (``install.sh``; docs/lms.md); this module checks the
build that is there: ``amx_problem`` before the embedded model loads, and ``python -m
judgetune.lm.llama_build`` (CI and ``install.sh``) on the library's own instructions, on any CPU.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

__all__ = ["AMX_MNEMONICS", "INSTALL_FLAGS", "amx_encodings", "amx_instructions", "amx_problem", "built_features",
           "cpu_flags", "library_files", "prepare_import", "rebuild_command"]

# every AMX instruction (tile configuration, loads and stores, and the dot products of AMX-INT8/BF16/FP16)
AMX_MNEMONICS = ("ldtilecfg", "sttilecfg", "tilerelease", "tilezero", "tileloadd", "tileloaddt1", "tilestored",
                 "tdpbssd", "tdpbsud", "tdpbusd", "tdpbuud", "tdpbf16ps", "tdpfp16ps")
# the compiler flags that keep a native build from using AMX (GCC and Clang; -march=native may not re-enable them)
INSTALL_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
_AMX_RE = re.compile(r"\s(" + "|".join(AMX_MNEMONICS) + r")\b")


def prepare_import() -> None:
    """Call before the process first imports llama_cpp: its OpenMP threads then sleep between calls instead of
    spinning (``OMP_WAIT_POLICY=PASSIVE``, read once when the library loads; a value the user set wins)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def built_features() -> dict[str, str]:
    """llama.cpp's own list of the code paths it was compiled with (``llama_print_system_info``), e.g.
    ``{"AVX2": "1", "AMX_INT8": "1", ...}``; empty without llama-cpp-python."""
    prepare_import()
    try:
        import llama_cpp
    except ImportError:
        return {}
    text = llama_cpp.llama_print_system_info().decode(errors="replace")
    return {k.strip(): v.strip() for k, v in re.findall(r"([A-Za-z0-9_]+)\s*=\s*([^|]+)", text)}


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """This CPU's feature flags as Linux lists them (empty elsewhere)."""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def library_files() -> list[Path]:
    """The installed llama.cpp CPU back-end libraries (``libggml-cpu*.so``, or ``libggml.so`` in old builds)."""
    try:
        files = metadata.files("llama_cpp_python") or []
    except metadata.PackageNotFoundError:
        return []
    paths = [Path(str(f.locate())) for f in files if re.search(r"libggml(-cpu[^/]*)?\.(so|dylib|dll)$", str(f))]
    return sorted(p for p in paths if p.is_file())


def amx_instructions(path: Path) -> int | None:
    """How many AMX instructions the machine code of ``path`` holds (by ``objdump -d``); None without objdump."""
    objdump = shutil.which("objdump")
    if objdump is None:
        return None
    run = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True,
                         errors="replace", check=True)
    return len(_AMX_RE.findall(run.stdout))


# an AMX instruction is a 3-byte VEX (C4), map 0F38, W0 and L0, opcode 49/4B/5C/5E, then its ModRM byte
_VEX_AMX = re.compile(rb"(?=\xc4([\x02\x22\x42\x62\x82\xa2\xc2\xe2])(.)([\x49\x4b\x5c\x5e])(.))", re.DOTALL)


def _is_amx(vex2: int, opcode: int, modrm: int) -> bool:
    """Whether the VEX byte after the map (W vvvv L pp), the opcode and the ModRM byte encode an AMX instruction."""
    if vex2 & 0x84:  # W1 or L1
        return False
    pp, mod, reg, rm = vex2 & 3, modrm >> 6, (modrm >> 3) & 7, modrm & 7
    if opcode == 0x49:  # LDTILECFG, STTILECFG (memory, /0), TILERELEASE (C0), TILEZERO (F2, a register)
        return (pp in (0, 1) and mod != 3 and reg == 0) or (pp == 0 and modrm == 0xC0) or (pp == 3 and mod == 3
                                                                                            and rm == 0)
    if opcode == 0x4B:  # TILELOADDT1 (66), TILESTORED (F3), TILELOADD (F2): memory with a SIB byte
        return pp != 0 and mod != 3 and rm == 4
    if opcode == 0x5E:  # TDPBSSD, TDPBSUD, TDPBUSD, TDPBUUD: three tile registers
        return mod == 3
    return pp in (2, 3) and mod == 3  # 5C: TDPBF16PS (F3), TDPFP16PS (F2)


def _code_sections(data: bytes) -> list[bytes]:
    """The executable sections of an x86-64 ELF file (none for another machine, where AMX cannot be).

    Raises:
        ValueError: not a 64-bit little-endian ELF file.
    """
    if data[:6] != b"\x7fELF\x02\x01":
        raise ValueError("not a 64-bit little-endian ELF file")
    if int.from_bytes(data[0x12:0x14], "little") != 62:  # EM_X86_64
        return []
    offset, size, count = (int.from_bytes(data[a:b], "little") for a, b in ((0x28, 0x30), (0x3A, 0x3C), (0x3C, 0x3E)))
    sections = []
    for i in range(count):
        header = data[offset + i * size: offset + (i + 1) * size]
        kind, flags = int.from_bytes(header[4:8], "little"), int.from_bytes(header[8:16], "little")
        start, length = int.from_bytes(header[24:32], "little"), int.from_bytes(header[32:40], "little")
        if flags & 0x4 and kind != 8:  # SHF_EXECINSTR, not SHT_NOBITS
            sections.append(data[start:start + length])
    return sections


def amx_encodings(path: Path) -> int:
    """How many byte sequences in the executable sections of ``path`` (an x86-64 ELF file) encode an AMX
    instruction, read without a disassembler: every AMX instruction is counted (none is missed), and bytes that
    only look like one inside other instructions are counted too (a count above 0 is checked with objdump).

    Raises:
        ValueError: not a 64-bit little-endian ELF file.
    """
    return sum(_is_amx(m.group(2)[0], m.group(3)[0], m.group(4)[0])
               for code in _code_sections(path.read_bytes()) for m in _VEX_AMX.finditer(code))


def rebuild_command() -> str:
    """The command that rebuilds the installed llama-cpp-python without AMX (bypassing pip's wheel cache,
    which is keyed by version, not by build flags)."""
    try:
        pin = f"=={metadata.version('llama_cpp_python')}"
    except metadata.PackageNotFoundError:
        pin = ""
    return (f"CMAKE_ARGS=\"-DLLAVA_BUILD=OFF '-DCMAKE_C_FLAGS={INSTALL_FLAGS}' '-DCMAKE_CXX_FLAGS={INSTALL_FLAGS}'\" "
            f"pip install --no-cache-dir --force-reinstall --no-deps llama-cpp-python{pin}")


def amx_problem(*, any_cpu: bool = False) -> str | None:
    """Why the installed llama.cpp would die here (built with AMX kernels on a CPU that has AMX), or None.
    ``any_cpu``: report an AMX build whatever this CPU is (the install check: the build must run on any)."""
    if built_features().get("AMX_INT8") != "1":
        return None
    if not any_cpu and "amx_tile" not in cpu_flags():
        return None  # the AMX kernels are never entered on a CPU without AMX
    return ("the installed llama-cpp-python was built with llama.cpp's AMX paths (AMX_INT8), which die with an illegal "
            "instruction on CPUs with AMX (pip builds it natively; see docs/lms.md); rebuild it without them: "
            + rebuild_command())


def main() -> int:
    """Print the build's CPU paths and AMX instruction counts; exit 1 if AMX is built in (on any CPU), or if the
    machine code cannot be read. Without objdump the code is scanned in Python (``amx_encodings``), said on stderr."""
    features = built_features()
    if not features:
        print("llama-cpp-python is not installed", file=sys.stderr)
        return 1
    print("llama.cpp built with: " + " ".join(f"{k}={v}" for k, v in features.items()))
    bad = amx_problem(any_cpu=True)
    files = library_files()
    if not files:
        print("no libggml-cpu library found in llama-cpp-python's files", file=sys.stderr)
        return 1
    disassembler = shutil.which("objdump") is not None
    if not disassembler:
        print("objdump (binutils) not found: llama.cpp's machine code is scanned for AMX encodings in Python instead",
              file=sys.stderr)
    for path in files:
        count = amx_instructions(path) if disassembler else _scanned(path)
        if count is None:
            print(f"{path}: its machine code cannot be read without objdump; install binutils (objdump) and run "
                  "python -m judgetune.lm.llama_build again", file=sys.stderr)
            return 1
        print(f"{path}: {count} AMX instructions ({'objdump' if disassembler else 'scanned without objdump'})")
        if count:
            bad = bad or f"{path.name} holds {count} AMX instructions; rebuild it: {rebuild_command()}"
    if bad:
        print(bad, file=sys.stderr)
        return 1
    return 0


def _scanned(path: Path) -> int | None:
    """``amx_encodings`` of ``path``, or None for a file that is no ELF file."""
    try:
        return amx_encodings(path)
    except ValueError:
        return None


if __name__ == "__main__":
    sys.exit(main())
