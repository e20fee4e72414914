#!/usr/bin/env bash
# How idmint's server scales with the cores it is given, beside Redis INCR in the same run.
#
# For each server core count N in SERVER_CORES (default "1 2 4 8"): a fresh `idmint serve`
# pinned to cores 0..N-1 (taskset) with TOKIO_WORKER_THREADS=N, and the load generators pinned
# to the cores after those (LOAD_CORES of them, default: the rest, at most 8), so they never
# share a core with the server. Single-id requests on every door:
#   HTTP  GET /v1/ids/bench?count=1       wrk
#   RESP  INCR counter:__rand_int__       redis-benchmark -t incr
#   gRPC  Next(count=1)                   h2load (one stream per connection)
# and Redis INCR (redis-server, single-threaded by design: pinned to one core, with
# io-threads = N as Redis 6+ can use) measured the same way at each N.
# Then a table: requests/s per door and N, the speed-up over N=1, and the ratio to Redis.
#
# A core count that does not leave at least one core for the load generators is not measured,
# and the script says so (on a 2-core machine only N=1 runs, against 1 load core).
#
# Usage:  bash bench/scale.sh
# Knobs: SERVER_CORES="1 2 4 8" LOAD_CORES=<auto> CONNS=100 DURATION=10 WARMUP=3
# Loopback only; starts and stops its own idmint and redis-server processes.
set -euo pipefail
# shellcheck source=bench/load/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/load/lib.sh"

SERVER_CORES=${SERVER_CORES:-"1 2 4 8"}
CONNS=${CONNS:-100}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-3}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CORES=$(nproc)
TICKS=$(getconf CLK_TCK)
QUIET_WAIT=${QUIET_WAIT:-20}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/idmint-scale.XXXXXX")
PIDS=()
cleanup() {
    local rc=$?
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "prerequisites"
need=()
command -v wrk >/dev/null || need+=(wrk)
command -v redis-benchmark >/dev/null || need+=(redis-tools)
command -v redis-server >/dev/null || need+=(redis-server)
command -v h2load >/dev/null || need+=(nghttp2-client)
command -v taskset >/dev/null || need+=(util-linux)
if ((${#need[@]})); then
    [[ $(id -u) -eq 0 ]] || die "missing: ${need[*]} (apt-get install -y ${need[*]})"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
IDMINT=${IDMINT:-"$ROOT/target/release/idmint"}
if [[ ! -x "$IDMINT" ]]; then
    (cd "$ROOT" && cargo build --release -p idmint-cli 2>&1 | tail -n 2)
fi
[[ -x "$IDMINT" ]] || die "no $IDMINT"
echo "$CORES cores; server core counts asked: $SERVER_CORES; $CONNS connections, ${DURATION}s per run"

# Cores cpu_first..cpu_first+n-1 as a taskset list.
cpus() { echo "$1-$(($1 + $2 - 1))"; }

# The request rate of one run, from each tool's output.
wrk_rps() { sed -n 's/^Requests\/sec:[[:space:]]*\([0-9.]*\).*/\1/p' "$1" | awk '{printf "%.0f", $1}'; }
rb_rps() { grep -i '"INCR"' "$1" | awk -F'","' '{printf "%.0f", $2}'; }
h2_rps() { sed -n 's/^finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p' "$1" | awk '{printf "%.0f", $1}'; }

# One door's run with the load generator on `load` cores ($2 = their count).
run_wrk() { taskset -c "$1" wrk -t "$2" -c "$CONNS" -d "${DURATION}s" "$3" >"$WORK/wrk.out"; wrk_rps "$WORK/wrk.out"; }
run_rb() {
    local n; n=$((DURATION * 400000))
    taskset -c "$1" redis-benchmark -h 127.0.0.1 -p "$3" -t incr -c "$CONNS" --threads "$2" -n "$n" --csv >"$WORK/rb.csv"
    rb_rps "$WORK/rb.csv"
}
run_h2() {
    taskset -c "$1" h2load -c "$CONNS" -m 1 -t "$2" -D "$DURATION" --warm-up-time "$WARMUP" \
        -H 'content-type: application/grpc' -H 'te: trailers' -d "$WORK/next.grpc" \
        "http://$3/idmint.v1.Idmint/Next" >"$WORK/h2.out" 2>&1
    grep -q ' 0 failed, 0 errored' "$WORK/h2.out" || die "gRPC requests failed: $(grep '^requests:' "$WORK/h2.out")"
    h2_rps "$WORK/h2.out"
}
printf '\x00\x00\x00\x00\x09\x0a\x05bench\x10\x01' >"$WORK/next.grpc"

declare -A HTTP RESP GRPC REDIS
measured=()
for n in $SERVER_CORES; do
    left=$((CORES - n))
    if ((left < 1)); then
        echo
        echo "== $n server cores: NOT MEASURED (this machine has $CORES cores; $n for the server leaves none for the load generators)"
        continue
    fi
    load=${LOAD_CORES:-$((left < 8 ? left : 8))}
    ((load <= left)) || load=$left
    srv=$(cpus 0 "$n") gen=$(cpus "$n" "$load")
    say "$n server cores ($srv), load generators on $load ($gen)"

    mkdir -p "$WORK/data$n"
    TOKIO_WORKER_THREADS=$n taskset -c "$srv" "$IDMINT" serve --data-dir "$WORK/data$n" \
        --http 127.0.0.1:0 --resp 127.0.0.1:0 --grpc 127.0.0.1:0 --log-format json \
        >"$WORK/serve$n.out" 2>"$WORK/serve$n.err" &
    spid=$!
    PIDS+=("$spid")
    for _ in $(seq 1 100); do grep -q 'RESP listening' "$WORK/serve$n.out" && break; sleep 0.1; done
    http=$(sed -n 's/^idmint listening on \(http:[^ ]*\).*/\1/p' "$WORK/serve$n.out")
    grpc=$(sed -n 's/^idmint gRPC listening on //p' "$WORK/serve$n.out")
    resp=$(sed -n 's/^idmint RESP listening on .*:\([0-9]*\)$/\1/p' "$WORK/serve$n.out")
    [[ -n "$http" && -n "$grpc" && -n "$resp" ]] || die "idmint did not start: $(cat "$WORK/serve$n.err")"
    curl -fsS "$http/v1/ids/bench" >/dev/null

    rport=$((16400 + n))
    taskset -c "$(cpus 0 "$n")" redis-server --port "$rport" --save '' --appendonly no \
        --io-threads "$n" --daemonize no >"$WORK/redis$n.out" 2>&1 &
    rpid=$!
    PIDS+=("$rpid")
    for _ in $(seq 1 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done

    wait_quiet "the runs at $n cores"
    HTTP[$n]=$(run_wrk "$gen" "$load" "$http/v1/ids/bench?count=1")
    echo "   HTTP  ${HTTP[$n]} req/s"
    RESP[$n]=$(run_rb "$gen" "$load" "$resp")
    echo "   RESP  ${RESP[$n]} req/s"
    GRPC[$n]=$(run_h2 "$gen" "$load" "$grpc")
    echo "   gRPC  ${GRPC[$n]} req/s"
    REDIS[$n]=$(run_rb "$gen" "$load" "$rport")
    echo "   Redis ${REDIS[$n]} req/s (INCR, io-threads $n)"

    kill -TERM "$spid" "$rpid"
    wait "$spid" "$rpid" 2>/dev/null || true
    measured+=("$n")
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b>0) printf "%.2f", a/b; else print "-" }'; }
say "summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), $CORES cores, $CONNS connections, ${DURATION}s per run)"
printf '%-8s %12s %12s %12s %12s %10s %10s %10s %10s %10s\n' "cores" "HTTP" "RESP" "gRPC" "Redis" "HTTP/1c" "RESP/1c" "gRPC/1c" "HTTP/Rd" "RESP/Rd"
for n in "${measured[@]}"; do
    b=${measured[0]}
    printf '%-8s %12s %12s %12s %12s %10s %10s %10s %10s %10s\n' "$n" "${HTTP[$n]}" "${RESP[$n]}" "${GRPC[$n]}" "${REDIS[$n]}" \
        "$(ratio "${HTTP[$n]}" "${HTTP[$b]}")" "$(ratio "${RESP[$n]}" "${RESP[$b]}")" "$(ratio "${GRPC[$n]}" "${GRPC[$b]}")" \
        "$(ratio "${HTTP[$n]}" "${REDIS[$n]}")" "$(ratio "${RESP[$n]}" "${REDIS[$n]}")"
done
for n in $SERVER_CORES; do
    [[ " ${measured[*]} " == *" $n "* ]] || echo "$n cores: not measured (needs at least $((n + 1)) cores)"
done
if [[ " ${measured[*]} " == *" 8 "* && " ${measured[*]} " == *" 1 "* ]]; then
    echo
    echo "targets: HTTP 8 cores / 1 core >= 7: $(ratio "${HTTP[8]}" "${HTTP[1]}"); HTTP at 8 cores / Redis >= 5: $(ratio "${HTTP[8]}" "${REDIS[8]}")"
else
    echo
    echo "targets (8 server cores at least 7x one core, and at least 5x Redis INCR): not measured here; they need a machine with 16 cores"
fi
