#!/bin/bash
# usage: wait-ready.sh PORT [SECONDS]: waits until http://127.0.0.1:PORT/health answers 200.
# Adapted from the project's shared/realservers. Exit 0 when ready, 1 after SECONDS (default 120).
set -uo pipefail
port=${1:?usage: wait-ready.sh PORT [SECONDS]}; limit=${2:-120}
deadline=$((SECONDS + limit))
while ((SECONDS < deadline)); do
  [[ $(curl -s -m 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health") == 200 ]] && exit 0
  sleep 0.2
done
echo "port $port not ready after $limit s" >&2; exit 1
