#!/usr/bin/env bash
# llama.cpp's C++ server (llama-server) for the tests of a served judge (tests/test_label_position.py), built from
# the llama.cpp source that llama-cpp-python vendors: its sdist, of the installed version (before the install, of the
# version the requirement resolves to), fetched by pip from the package registry (or pip's cache). Never a binary
# from elsewhere. Built once into .ci/llama.cpp/ (git-ignored);
# prints the binary's path. At the lowest priority, llama-server alone, on every core (LLAMA_SERVER_JOBS=1 on a machine
# whose cores are busy).
#   bash .ci/llama_server.sh                  build (or find) it
#   JUDGETUNE_LLAMA_SERVER=$(bash .ci/llama_server.sh) python -m pytest tests/test_label_position.py
set -euo pipefail
cd "$(dirname "$0")/.."
dest="$PWD/.ci/llama.cpp"
binary="$dest/build/bin/llama-server"
if [ -x "$binary" ]; then
    echo "$binary"
    exit 0
fi
# the installed version; before the install (.ci/run starts this first), the newest the project's requirement allows,
# which is what the install then picks (.ci/run checks they agree: the version is kept in $dest/VERSION)
requirement="$(python -c 'from importlib.metadata import version; print("llama-cpp-python==" + version("llama_cpp_python"))' \
    2>/dev/null || python -c 'import tomllib; print(next(d for d in tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"] if d.startswith("llama-cpp-python")))')"
mkdir -p "$dest"
if [ ! -f "$dest/src/CMakeLists.txt" ]; then
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    python -m pip download --quiet --no-deps --no-binary :all: "$requirement" -d "$work" >&2
    sdist="$(ls "$work"/llama_cpp_python-*.tar.gz)"
    version="${sdist##*/llama_cpp_python-}" version="${version%.tar.gz}"
    tar -xzf "$sdist" -C "$work"
    rm -rf "$dest/src"
    mv "$work/llama_cpp_python-$version/vendor/llama.cpp" "$dest/src"
    echo "$version" > "$dest/VERSION"
fi
# as install.sh builds llama-cpp-python: no AMX kernels (they die with an illegal instruction on Intel CPUs with
# AMX); no web UI (it would be fetched from a bucket), no HTTPS, no tests or examples; one static binary
flags=""
[ "$(uname -m)" = x86_64 ] && flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
cmake -S "$dest/src" -B "$dest/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF \
    "-DCMAKE_C_FLAGS=$flags" "-DCMAKE_CXX_FLAGS=$flags" >&2
nice -n 19 cmake --build "$dest/build" --config Release -j "${LLAMA_SERVER_JOBS:-$(nproc)}" --target llama-server >&2
echo "$binary"
