#!/usr/bin/env bash
# Two idmint binaries in alternating runs on the same machine: RESP INCR (redis-benchmark) and
# HTTP count=1 (wrk), ROUNDS times each, then Redis INCR once, so a change is compared with
# its base under the same load of the day. Build the base in a worktree first, e.g.:
#   git worktree add /tmp/base <rev> && (cd /tmp/base && cargo build --release -p idmint-cli)
#   bash bench/load/ab_binaries.sh /tmp/base/target/release/idmint target/release/idmint
# Knobs: ROUNDS=2 CONNS=50 REQUESTS=1000000 SECONDS_HTTP=10. Loopback only.
set -euo pipefail
base=${1:?usage: ab_binaries.sh BASE_BINARY NEW_BINARY}
new=${2:?usage: ab_binaries.sh BASE_BINARY NEW_BINARY}
ROUNDS=${ROUNDS:-2}
CONNS=${CONNS:-50}
REQUESTS=${REQUESTS:-1000000}
SECONDS_HTTP=${SECONDS_HTTP:-10}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

run() { # NAME BINARY
  local dir http resp pid rps wrk_rps
  dir=$(mktemp -d)
  http=$(free_port)
  resp=$(free_port)
  "$2" serve --data-dir "$dir/data" --http "127.0.0.1:$http" --resp "127.0.0.1:$resp" >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -fs "127.0.0.1:$http/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
  redis-benchmark -p "$resp" -c "$CONNS" --threads 2 -n 100000 -t incr -q >/dev/null 2>&1
  rps=$(redis-benchmark -p "$resp" -c "$CONNS" --threads 2 -n "$REQUESTS" -t incr -q 2>/dev/null |
    grep -o '[0-9.]* requests per second' | head -1 | cut -d' ' -f1)
  wrk_rps=$(wrk -t2 -c"$CONNS" -d"${SECONDS_HTTP}s" "http://127.0.0.1:$http/v1/ids/bench?count=1" 2>/dev/null |
    awk '/Requests\/sec/{print $2}')
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  rm -rf "$dir"
  printf '%-5s RESP INCR %10s req/s   HTTP count=1 %10s req/s\n' "$1" "$rps" "$wrk_rps"
}

for _ in $(seq "$ROUNDS"); do
  run base "$base"
  run new "$new"
done
printf 'Redis INCR %s req/s\n' "$(redis-benchmark -c "$CONNS" --threads 2 -n "$REQUESTS" -t incr -q 2>/dev/null |
  grep -o '[0-9.]* requests per second' | head -1 | cut -d' ' -f1)"
