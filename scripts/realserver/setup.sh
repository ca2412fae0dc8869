#!/usr/bin/env bash
# Builds a REAL OpenAI-compatible server (llama.cpp's `llama-server`) and a tiny random-weight model, offline, once.
#
# Both live outside the clone in $LOADSHAPE_LLAMA_DIR (default ~/.cache/loadshape-llama) and are reused: a second
# run checks they exist and builds nothing. llama.cpp comes from the PyPI sdist of llama-cpp-python, which vendors
# it; the models are made locally by make_model.py (no hub is reachable). Prints the server binary and model paths.
#   scripts/realserver/setup.sh            build what is missing
#   scripts/realserver/setup.sh --paths    print `LLAMA_SERVER=...`, `LLAMA_MODEL=...` and `LLAMA_DRAFT_MODEL=...`
#                                          lines (nothing is built)
# LLAMA_DRAFT_MODEL is a draft model for speculative decoding (`llama-server -md DRAFT --spec-type draft-simple`):
# the tiny model with noise of DRAFT_PERTURB times its weights' scale added, so it shares the tokenizer and agrees
# with the target on about half the drafted tokens when both decode greedily (measured: docs/measurements.md,
# "Speculative decoding against llama-server").
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LLAMA_PY_VERSION="${LLAMA_PY_VERSION:-0.3.36}"
dir="${LOADSHAPE_LLAMA_DIR:-$HOME/.cache/loadshape-llama}"
src="$dir/src/llama_cpp_python-$LLAMA_PY_VERSION"
# The build's folder names what shapes the binary: the version and the optimization split below (a changed split
# builds anew and removes the other builds; an interrupted build resumes).
build="$dir/build-$LLAMA_PY_VERSION-ggml-O3-rest-O1-std-pch"
server="$build/bin/llama-server"
venv="$dir/venv"
model_hash="$(sha256sum "$here/make_model.py" | cut -c1-12)"
model="$dir/models/tiny-$model_hash.gguf"
# 0.05: 0.49 of the drafted tokens accepted with 4 drafted per step at temperature 0 (0.1: 0.32, 0.2: 0.13, 0.5:
# 0.02); sampled at temperature 0.6 the random model's flat distribution accepts about 1 % whatever the draft.
DRAFT_PERTURB=0.05
draft="$dir/models/tiny-draft-$DRAFT_PERTURB-$model_hash.gguf"

if [ "${1:-}" = "--paths" ]; then
  echo "LLAMA_SERVER=$server"
  echo "LLAMA_MODEL=$model"
  echo "LLAMA_DRAFT_MODEL=$draft"
  exit 0
fi

say() { printf '\n\033[1m== realserver: %s\033[0m\n' "$*"; }
mkdir -p "$dir/src" "$dir/models"

if [ ! -x "$server" ]; then
  if ! command -v cmake >/dev/null; then
    say "apt: cmake"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends cmake
  fi
  if [ ! -d "$src/vendor/llama.cpp" ]; then
    say "pip download llama-cpp-python==$LLAMA_PY_VERSION (sdist, vendors llama.cpp)"
    tmp="$(mktemp -d)"
    python3 -m pip download --quiet --no-binary llama-cpp-python --no-deps "llama-cpp-python==$LLAMA_PY_VERSION" -d "$tmp"
    tar -xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$dir/src"
    rm -rf "$tmp"
  fi
  say "build llama-server (≈ 10-15 min on 2 cores)"
  # ggml's kernels (where the model's time goes) at -O3, the rest (HTTP, JSON, chat templates, tokenizer, graph
  # building: 89 % of the compile time) at -O1, which takes 22 % less CPU to build; llama-server's own timings of a
  # 3,000-token prompt and 200 generated tokens: prefill as fast, decode 8-13 % slower per token
  # (docs/measurements.md, "CI, cold on a fresh machine"). The C++ standard headers are precompiled once per library
  # for llama, llama-common and mtmd (std_pch.cmake).
  # LLAMA_USE_PREBUILT_UI=OFF: otherwise the build downloads the web UI and fails offline.
  for old in "$dir"/build-*; do [ "$old" = "$build" ] || rm -rf "$old"; done
  cmake -S "$src/vendor/llama.cpp" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" \
    -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_PROJECT_ggml_INCLUDE="$here/ggml_O3.cmake" \
    -DCMAKE_PROJECT_llama.cpp_INCLUDE="$here/std_pch.cmake" \
    -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    >"$dir/cmake.log" 2>&1 \
    || { tail -30 "$dir/cmake.log"; exit 1; }
  cmake --build "$build" --target llama-server -j "$(nproc)" >"$dir/build.log" 2>&1 \
    || { tail -30 "$dir/build.log"; exit 1; }
fi

if [ ! -f "$model" ] || [ ! -f "$draft" ]; then
  if [ ! -x "$venv/bin/python" ]; then
    say "python venv: numpy, tokenizers, gguf (llama.cpp's own gguf-py)"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet numpy tokenizers
  fi
  if ! "$venv/bin/python" -c 'import gguf' 2>/dev/null; then
    if [ -d "$src/vendor/llama.cpp/gguf-py" ]; then
      "$venv/bin/pip" install --quiet "$src/vendor/llama.cpp/gguf-py"
    else
      "$venv/bin/pip" install --quiet gguf
    fi
  fi
fi
if [ ! -f "$model" ]; then
  say "make the tiny model"
  "$venv/bin/python" "$here/make_model.py" "$model.tmp"
  mv "$model.tmp" "$model"
fi
if [ ! -f "$draft" ]; then
  say "make the draft model (the tiny model perturbed by $DRAFT_PERTURB)"
  "$venv/bin/python" "$here/make_model.py" "$draft.tmp" --perturb "$DRAFT_PERTURB"
  mv "$draft.tmp" "$draft"
fi

echo "LLAMA_SERVER=$server"
echo "LLAMA_MODEL=$model"
echo "LLAMA_DRAFT_MODEL=$draft"
