#!/bin/bash
# The real-server integration suite: builds real vLLM (CPU) and llama.cpp llama-server once, cached in
# ${LPXTOP_REALSERVERS:-${XDG_CACHE_HOME:-~/.cache}/lpxtop-realservers} (cold: ~10-15 min on 2 cores; warm:
# a check of a few files), then runs the tests marked `realserver` with LPXTOP_REQUIRE_REALSERVERS=1, so
# a missing server or lpxtop API fails instead of skipping.
# usage: .ci/realservers.sh [extra pytest args]
# Exit status: non-zero when the build fails (that step's log tail is printed) or any test fails or errors.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-$ROOT/.venv/bin/python}
[[ -x $PY ]] || { echo "realservers.sh: no Python at $PY (set PYTHON)" >&2; exit 2; }

t0=$SECONDS
if ! bash tests/integration/realservers/setup.sh; then
  echo "realservers.sh: building the real servers failed" >&2; exit 1
fi
t1=$SECONDS
echo "realservers.sh: servers ready ($((t1 - t0)) s)"

rc=0
# -n 0: one process (the main suite's addopts run four workers): the real servers are shared and each
# test measures them, so the tests must not run beside one another.
LPXTOP_REQUIRE_REALSERVERS=1 "$PY" -m pytest -n 0 -m realserver tests/integration -q -rfEs "$@" || rc=$?
echo "realservers.sh: tests took $((SECONDS - t1)) s, pytest exit $rc"
exit "$rc"
