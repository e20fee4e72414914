#!/usr/bin/env bash
# Where the HTTP single-id p99 goes (issue 12 item 3): scheduling, measured.
#
# For idmint with 2 tokio workers (the default on this 2-core machine) and with 1, and for
# Redis INCR (one thread), each with the same 50-connection client on the same cores:
#   1. a latency run: requests/s and p99 (wrk, or redis-benchmark for Redis);
#   2. a second run under `perf sched record` (machine-wide scheduler events), summarised by
#      `perf sched latency`: for the server's threads, the time they spent runnable but not
#      running (average and worst wake-up delay) and their context switches per request.
# A tail that follows the run-queue delay, not the instructions per request, is scheduling:
# client and server threads taking turns on two cores.
#
# Usage:  bash bench/load/p99_profile.sh      (root, or perf_event_paranoid <= 0, for perf)
# Knobs (environment): CONNS=50 THREADS=2 DURATION=10 QUIET_WAIT=30
set -euo pipefail
QUIET_SAMPLE=1
# shellcheck source=bench/load/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CONNS=${CONNS:-50}
THREADS=${THREADS:-2}
DURATION=${DURATION:-10}
QUIET_WAIT=${QUIET_WAIT:-30}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TICKS=$(getconf CLK_TCK)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/idmint-p99.XXXXXX")
SERVER_PID=""
REDIS_PORT=${REDIS_PORT:-6392}
REDIS_PID=""
cleanup() {
    local rc=$?
    for pid in $SERVER_PID $REDIS_PID; do
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for t in wrk perf redis-benchmark redis-server; do
    command -v "$t" >/dev/null || die "$t is missing (apt-get install -y wrk linux-perf redis-tools redis-server)"
done
(cd "$ROOT" && cargo build --release -p idmint-cli 2>&1 | tail -n 1)
IDMINT="$ROOT/target/release/idmint"

# sched_summary PATTERN REQUESTS: perf sched latency rows whose task matches PATTERN, summed:
# runtime, switches, the switch-weighted average delay and the worst delay.
sched_summary() {
    perf sched latency -i "$WORK/sched.data" 2>/dev/null | awk -v pat="$1" -v req="$2" -F'|' '
        $1 ~ pat {
            gsub(/ms/, "", $2); gsub(/avg:|ms/, "", $4); gsub(/max:|ms/, "", $5)
            run += $2; sw += $3; delay += $3 * $4; if ($5 + 0 > max) max = $5 + 0
        }
        END {
            if (sw == 0) { print "no rows"; exit }
            printf "switches/request %.2f, avg wake-up delay %.3f ms, worst %.3f ms, cpu %.0f ms", sw / req, delay / sw, max, run
        }'
}

# idmint_case WORKERS: a latency run and a perf-sched run against idmint with that many tokio
# workers; prints one summary line.
idmint_case() {
    local workers=$1 base line req
    mkdir -p "$WORK/data-$workers"
    TOKIO_WORKER_THREADS=$workers "$IDMINT" serve --data-dir "$WORK/data-$workers" --http 127.0.0.1:0 >"$WORK/out" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 100); do
        base=$(sed -n 's/^idmint listening on \(http:[^ ]*\).*/\1/p' "$WORK/out" | head -n1)
        [[ -n "$base" ]] && break
        sleep 0.1
    done
    [[ -n "$base" ]] || die "idmint did not start: $(cat "$WORK/out")"
    curl -fsS "$base/v1/ids/bench" >/dev/null
    wrk -t"$THREADS" -c"$CONNS" -d3s "$base/v1/ids/bench" >/dev/null
    wait_quiet "idmint, $workers workers"
    line=$(wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency "$base/v1/ids/bench")
    local rps p99
    rps=$(echo "$line" | awk '/Requests\/sec/{print $2}')
    p99=$(echo "$line" | awk '$1=="99%"{print $2}')
    perf sched record -q -o "$WORK/sched.data" -- wrk -t"$THREADS" -c"$CONNS" -d5s "$base/v1/ids/bench" >"$WORK/wrk2" 2>/dev/null
    req=$(awk '/requests in/{print $1}' "$WORK/wrk2")
    printf '%-26s %10s req/s  p99 %-8s | server: %s\n' "idmint, $workers workers" "$rps" "$p99" "$(sched_summary 'tokio-rt|tokio-runtime|idmint' "$req")"
    printf '%-26s %10s        %-12s | wrk:    %s\n' "" "" "" "$(sched_summary '^ *wrk' "$req")"
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
}

say "idmint GET /v1/ids/bench, $CONNS connections, wrk -t$THREADS, ${DURATION}s; then 5 s under perf sched"
idmint_case 2
idmint_case 1

say "Redis INCR (private redis-server on $REDIS_PORT, no persistence), redis-benchmark -c $CONNS --threads $THREADS"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" >"$WORK/redis.out" 2>&1 &
REDIS_PID=$!
for _ in $(seq 1 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
wait_quiet "Redis"
csv=$(redis-benchmark -p "$REDIS_PORT" -t incr -c "$CONNS" --threads "$THREADS" -n 1000000 --csv | grep -i '"INCR"')
rps=$(echo "$csv" | awk -F'","' '{printf "%.0f", $2}')
p99=$(echo "$csv" | awk -F'","' '{print $7 "ms"}')
perf sched record -q -o "$WORK/sched.data" -- redis-benchmark -p "$REDIS_PORT" -t incr -c "$CONNS" --threads "$THREADS" -n 500000 -q >/dev/null 2>&1
printf '%-26s %10s req/s  p99 %-8s | server: %s\n' "Redis INCR" "$rps" "$p99" "$(sched_summary 'redis-server' 500000)"
printf '%-26s %10s        %-12s | client: %s\n' "" "" "" "$(sched_summary 'redis-benchmark' 500000)"
