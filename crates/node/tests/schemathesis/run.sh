#!/usr/bin/env bash
# Schemathesis against a live node: starts `idmint serve` (debug build) on a fresh data directory
# with idmint.toml beside this script, then runs every check of Schemathesis on every operation
# of GET /openapi.json (schemathesis.toml beside this script says which check is off where, and
# why). Fails on any failure: a 5xx, an answer outside the schema, a status not documented.
#
#   bash crates/node/tests/schemathesis/run.sh [MAX_EXAMPLES]   (default 100 per operation)
#
# Needs `schemathesis` (PyPI, 4.x) on PATH; scripts/test.sh installs it. Honours
# CARGO_TARGET_DIR.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
examples="${1:-100}"

command -v schemathesis >/dev/null || {
  echo "error: schemathesis is not installed: python3 -m pip install 'schemathesis>=4,<5'" >&2
  exit 1
}

cargo build --quiet --manifest-path "$root/Cargo.toml" -p idmint-cli
bin="${CARGO_TARGET_DIR:-$root/target}/debug/idmint"

work="$(mktemp -d)"
server=""
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$bin" serve --config "$here/idmint.toml" --data-dir "$work/data" --http "127.0.0.1:$port" --init \
  >"$work/stdout" 2>"$work/stderr" &
server=$!
for _ in $(seq 1 100); do
  grep -q "listening" "$work/stdout" 2>/dev/null && break
  kill -0 "$server" 2>/dev/null || { cat "$work/stderr" >&2; echo "error: idmint serve exited" >&2; exit 1; }
  sleep 0.1
done
grep -q "listening" "$work/stdout" || { cat "$work/stderr" >&2; echo "error: idmint serve did not listen within 10 s" >&2; exit 1; }

cd "$work"   # Schemathesis writes its files (reports) under the working directory
status=0
schemathesis --config-file "$here/schemathesis.toml" run "http://127.0.0.1:$port/openapi.json" \
  --checks all --max-examples "$examples" --workers 2 \
  --request-timeout 10 --report junit --report-dir "$work/report" || status=$?
if ! kill -0 "$server" 2>/dev/null; then
  echo "error: idmint serve died during the run" >&2
  tail -n 50 "$work/stderr" >&2
  exit 1
fi
if grep -qi "panicked" "$work/stderr"; then
  grep -i -A5 "panicked" "$work/stderr" >&2
  echo "error: the server panicked" >&2
  exit 1
fi
exit "$status"
