#!/usr/bin/env bash
# Schemathesis against a live node: starts `idmint serve` (debug build) on a fresh data directory
# with idmint.toml beside this script, then runs every check of Schemathesis on every operation
# of GET /openapi.json (schemathesis.toml beside this script says which check is off where, and
# why). Fails on any failure: a 5xx, an answer outside the schema, a status not documented, a
# dead or panicking server.
#
#   bash crates/node/tests/schemathesis/run.sh [MAX_EXAMPLES]   (default 100 per operation)
#
# Needs `schemathesis` (PyPI, 4.x) on PATH; scripts/test.sh installs it. Honours
# CARGO_TARGET_DIR.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
examples="${1:-100}"

command -v schemathesis >/dev/null || {
  echo "error: schemathesis is not installed: python3 -m pip install 'schemathesis>=4,<5'" >&2
  exit 1
}
source "$here/../support/live_node.sh"
start_node "$here/idmint.toml"

cd "$work"   # Schemathesis writes its files (reports) under the working directory
status=0
schemathesis --config-file "$here/schemathesis.toml" run "$base/openapi.json" \
  --checks all --max-examples "$examples" --workers 2 \
  --request-timeout 10 --report junit --report-dir "$work/report" || status=$?
check_node
exit "$status"
