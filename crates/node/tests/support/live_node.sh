# Sourced by the scripts that test a live `idmint serve` (schemathesis/run.sh,
# status_page/run.sh): builds the debug binary, starts it on a fresh data directory and a free
# loopback port, and stops it (by its own pid) when the script exits.
#
#   start_node CONFIG_FILE [DATA]  sets $base (http://127.0.0.1:PORT), $work (a temp dir, removed
#                            at exit) and $server (the pid), the data directory $work/DATA
#                            (default data); the log is $work/stderr.
#   stop_node_only           stops the node (another may be started).
#   check_node               fails if the server died or panicked.

live_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)"
server=""
work="$(mktemp -d)"
stop_node_only() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  server=""
}
stop_node() {
  stop_node_only
  rm -rf "$work"
}
trap stop_node EXIT

start_node() {
  cargo build --quiet --manifest-path "$live_root/Cargo.toml" -p idmint-cli
  local bin="${CARGO_TARGET_DIR:-$live_root/target}/debug/idmint"
  local port
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  "$bin" serve --config "$1" --data-dir "$work/${2:-data}" --http "127.0.0.1:$port" --init \
    >"$work/stdout" 2>"$work/stderr" &
  server=$!
  for _ in $(seq 1 100); do
    grep -q "listening" "$work/stdout" 2>/dev/null && break
    kill -0 "$server" 2>/dev/null || { cat "$work/stderr" >&2; echo "error: idmint serve exited" >&2; exit 1; }
    sleep 0.1
  done
  grep -q "listening" "$work/stdout" || { cat "$work/stderr" >&2; echo "error: idmint serve did not listen within 10 s" >&2; exit 1; }
  base="http://127.0.0.1:$port"
}

check_node() {
  if ! kill -0 "$server" 2>/dev/null; then
    tail -n 50 "$work/stderr" >&2
    echo "error: idmint serve died during the run" >&2
    exit 1
  fi
  if grep -qi "panicked" "$work/stderr"; then
    grep -i -A5 "panicked" "$work/stderr" >&2
    echo "error: the server panicked" >&2
    exit 1
  fi
}
