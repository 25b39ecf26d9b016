#!/usr/bin/env bash
# judgetune's install: a virtualenv in .venv with judgetune in it (editable), llama.cpp compiled for this CPU.
#   bash install.sh            the package and its embedded defaults
#   bash install.sh '[test]'   with extras
# pip compiles llama-cpp-python (no Linux wheel on PyPI) natively for this CPU; on x86-64 it is built without
# llama.cpp's AMX kernels, which die with an illegal instruction on Intel CPUs with AMX (docs/lms.md). A wheel
# pip cached from an earlier build with other flags is caught by the check below and rebuilt.
set -euo pipefail
cd "$(dirname "$0")"
extras="${1:-}"
[ -x .venv/bin/python ] || python3 -m venv .venv
. .venv/bin/activate
# llama-cpp-python loads only libllama and libggml: skip llama.cpp's image/audio library (LLAVA_BUILD) and its
# `common` library with its HTTP client (forced on by llama-cpp-python; a variable set after llama.cpp's project()
# turns it off): about half of the compile
slim="$PWD/.venv/llama-cpp-slim.cmake"
echo 'set(LLAMA_BUILD_COMMON OFF)  # judgetune install.sh: llama-cpp-python never loads libllama-common' > "$slim"
args="-DLLAVA_BUILD=OFF '-DCMAKE_PROJECT_llama.cpp_INCLUDE=$slim'"
if [ "$(uname -m)" = x86_64 ]; then
    flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    args="$args '-DCMAKE_C_FLAGS=$flags' '-DCMAKE_CXX_FLAGS=$flags'"
fi
echo "install.sh: pip install -e .$extras (CMAKE_ARGS=$args; compiling llama.cpp takes a few minutes)"
CMAKE_ARGS="$args" python -m pip install -e ".$extras"
if ! python -m judgetune.lm.llama_build >/dev/null; then
    echo "install.sh: the installed llama-cpp-python has AMX kernels (a wheel pip cached earlier); rebuilding it"
    version="$(python -c 'from importlib.metadata import version; print(version("llama_cpp_python"))')"
    CMAKE_ARGS="$args" python -m pip install --no-cache-dir --force-reinstall --no-deps "llama-cpp-python==$version"
    python -m judgetune.lm.llama_build
fi
echo "install.sh: done; activate it with: . .venv/bin/activate"
