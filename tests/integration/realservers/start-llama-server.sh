#!/bin/bash
# Starts llama.cpp's llama-server on 127.0.0.1:${PORT:-8013} with /metrics; prints its PID.
# Adapted from the project's shared/realservers.
# NP slots (default 4): a fifth concurrent request is deferred (llamacpp:requests_deferred). Ready in <1 s.
# CTX: context size shared by all slots (default 4096, so 1024 tokens per slot with 4 slots).
# METRICS=0: start without --metrics (its /metrics then answers 501). Log: $R/logs/llama-server-$PORT.log
# LPXTOP_FOREGROUND=1: run the server in this process (exec, output on stdout/stderr) for a caller that
# manages the process itself, as the pytest fixtures do. Exit 3 when the cache is not built.
set -euo pipefail
R=${LPXTOP_REALSERVERS:-${XDG_CACHE_HOME:-$HOME/.cache}/lpxtop-realservers}; PORT=${PORT:-8013}
if [[ ! -x $R/llama-server-build/bin/llama-server || ! -f $R/tiny-llama.gguf ]]; then
  echo "start-llama-server.sh: llama-server not built in $R: run $(dirname "$0")/setup.sh llama" >&2; exit 3
fi
cd "$R"; mkdir -p "$R/logs"
metrics=(--metrics); [[ ${METRICS:-1} == 0 ]] && metrics=()
cmd=(llama-server-build/bin/llama-server -m "$R/tiny-llama.gguf" --alias tiny-llama
  --host 127.0.0.1 --port "$PORT" "${metrics[@]}" --offline -c "${CTX:-4096}" -np "${NP:-4}" -t 2 --jinja "$@")
if [[ ${LPXTOP_FOREGROUND:-0} == 1 ]]; then exec "${cmd[@]}"; fi
setsid nohup "${cmd[@]}" >"$R/logs/llama-server-$PORT.log" 2>&1 &
echo $!
