#!/usr/bin/env bash
# RESP benchmark: idmint's RESP front-end against Redis on this machine, with the same client
# (redis-benchmark) and the same settings for each server:
#   1. idmint   `idmint serve --resp` (file authority: every id it hands out is durable)
#   2. Redis    no persistence (its INCRs are not durable)
#   3. Redis    appendonly yes, appendfsync always (an fsync per write: durable)
# each with 50 connections, without pipelining (-P 1) and with -P 16, then a summary with the
# targets (idmint >= 1.0x Redis requests/s, p99 <= Redis's p99) met or missed, and a durability
# check of idmint (kill -9, restart: the next id is above every id handed out before).
#
# The command is `redis-benchmark -t incr` as it is: it increments the key `counter:__rand_int__`,
# a valid namespace name (':' is allowed after the first character). Both servers get the very
# same command.
#
# Usage:  bash bench/resp/run.sh
# Knobs (environment): CONNS=50 THREADS=2 REQUESTS=1000000 PIPELINED_REQUESTS=8000000
#   PIPELINES="1 16" ROUNDS=3 QUIET_WAIT=30 IDMINT_PORT=7380 REDIS_PORT=6390 REDIS_FSYNC_PORT=6391
#   REQUESTS is -n without pipelining, PIPELINED_REQUESTS with: redis-benchmark times a run in
#   whole milliseconds, so runs must last seconds (-n 200000 -P 16 takes a quarter of a second
#   and quantises requests/s). Each server is measured ROUNDS times, the servers taking turns;
#   the summary shows the median of each figure (req/s, p50, p99) over the rounds.
#   redis-benchmark prints "WARNING: Could not fetch server CONFIG" for idmint, whose CONFIG GET
#   answers nothing; it only means the header lacks Redis's save/appendonly settings.
#   Before each measurement the script waits up to QUIET_WAIT s for other processes to leave
#   the cores alone (bench/load/lib.sh), and says so when they did not.
#
# Needs `idmint serve --resp HOST:PORT`. Starts (and stops) its own idmint and two private
# redis-server processes on their own ports, with their data in a temporary directory.
set -euo pipefail
QUIET_SAMPLE=1
# shellcheck source=bench/load/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../load/lib.sh"

CONNS=${CONNS:-50}
THREADS=${THREADS:-2}
REQUESTS=${REQUESTS:-1000000}
PIPELINED_REQUESTS=${PIPELINED_REQUESTS:-8000000}
PIPELINES=${PIPELINES:-"1 16"}
ROUNDS=${ROUNDS:-3}
QUIET_WAIT=${QUIET_WAIT:-30}
IDMINT_PORT=${IDMINT_PORT:-7380}
REDIS_PORT=${REDIS_PORT:-6390}
REDIS_FSYNC_PORT=${REDIS_FSYNC_PORT:-6391}
NS="counter:__rand_int__" # redis-benchmark -t incr's key

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TICKS=$(getconf CLK_TCK)
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
IDMINT="$TARGET_DIR/release/idmint"

WORK=$(mktemp -d)
PIDS=()
cleanup() {
    local rc=$?
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "prerequisites"
need_pkgs=()
command -v redis-benchmark >/dev/null || need_pkgs+=(redis-tools)
command -v redis-server >/dev/null || need_pkgs+=(redis-server)
if ((${#need_pkgs[@]})); then
    SUDO=""
    [[ $(id -u) -eq 0 ]] || SUDO="sudo"
    echo "installing: ${need_pkgs[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi
for t in redis-benchmark redis-server redis-cli cargo; do
    command -v "$t" >/dev/null || die "$t is missing (apt-get install -y redis-tools redis-server; cargo from rustup)"
done
echo "$(redis-server --version | awk '{print $1, $3}'), $(redis-benchmark --version)"
echo "machine: $(nproc) cores, $(awk '/MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo)"

say "building idmint (release)"
(cd "$ROOT" && cargo build --release -p idmint-cli 2>&1 | tail -n 1)
[[ -x "$IDMINT" ]] || die "no binary at $IDMINT (set CARGO_TARGET_DIR as for the build)"

# Waits until `redis-cli -p $1 PING` answers.
wait_ping() {
    for _ in $(seq 1 100); do
        [[ "$(redis-cli -p "$1" PING 2>/dev/null)" == PONG ]] && return 0
        sleep 0.1
    done
    die "nothing answers PING on port $1"
}

start_idmint() {
    "$IDMINT" serve --data-dir "$WORK/idmint-data" --http 127.0.0.1:0 \
        --resp "127.0.0.1:$IDMINT_PORT" >>"$WORK/idmint.out" 2>&1 &
    IDMINT_PID=$!
    PIDS+=("$IDMINT_PID")
    wait_ping "$IDMINT_PORT"
}

say "servers"
start_idmint
echo "idmint: pid $IDMINT_PID, RESP on 127.0.0.1:$IDMINT_PORT, file authority in $WORK/idmint-data"
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
    --dir "$WORK" >"$WORK/redis.out" 2>&1 &
PIDS+=($!)
mkdir -p "$WORK/redis-fsync"
redis-server --bind 127.0.0.1 --port "$REDIS_FSYNC_PORT" --save "" --appendonly yes \
    --appendfsync always --dir "$WORK/redis-fsync" >"$WORK/redis-fsync.out" 2>&1 &
PIDS+=($!)
wait_ping "$REDIS_PORT"
wait_ping "$REDIS_FSYNC_PORT"
echo "redis: 127.0.0.1:$REDIS_PORT (no persistence), 127.0.0.1:$REDIS_FSYNC_PORT (appendfsync always)"

# Warm-up: idmint sizes its blocks from demand; Redis creates the key.
for port in "$IDMINT_PORT" "$REDIS_PORT" "$REDIS_FSYNC_PORT"; do
    redis-benchmark -h 127.0.0.1 -p "$port" -c "$CONNS" --threads "$THREADS" -n 50000 -P 16 \
        -q -t incr >/dev/null
done

declare -A RPS P50 P99
# Measures `-t incr` on port $2 with pipeline $3; $1 names the row. Appends
# "rps p50 p99" to $WORK/$1-$3.txt.
measure() {
    local name=$1 port=$2 pipe=$3 n=$REQUESTS line rps p50 p99
    ((pipe > 1)) && n=$PIPELINED_REQUESTS
    wait_quiet "$name -P $pipe"
    echo "-- redis-benchmark -h 127.0.0.1 -p $port -c $CONNS --threads $THREADS -n $n -P $pipe --csv -t incr"
    line=$(redis-benchmark -h 127.0.0.1 -p "$port" -c "$CONNS" --threads "$THREADS" \
        -n "$n" -P "$pipe" --csv -t incr 2>/dev/null | tail -n 1)
    # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    rps=$(echo "$line" | awk -F'","' '{printf "%.0f", $2}')
    p50=$(echo "$line" | awk -F'","' '{print $5}')
    p99=$(echo "$line" | awk -F'","' '{print $7}')
    echo "$rps $p50 $p99" >>"$WORK/$name-$pipe.txt"
    echo "   => $rps req/s, p50 $p50 ms, p99 $p99 ms"
}

for pipe in $PIPELINES; do
    for round in $(seq 1 "$ROUNDS"); do
        say "pipeline $pipe, round $round of $ROUNDS"
        measure idmint "$IDMINT_PORT" "$pipe"
        measure redis "$REDIS_PORT" "$pipe"
        measure redis-fsync "$REDIS_FSYNC_PORT" "$pipe"
    done
    for name in idmint redis redis-fsync; do
        # The median of each figure over the rounds, taken separately.
        median() { awk -v c="$1" '{print $c}' "$WORK/$name-$pipe.txt" | sort -g | sed -n "$(((ROUNDS + 1) / 2))p"; }
        RPS[$name/$pipe]=$(median 1)
        P50[$name/$pipe]=$(median 2)
        P99[$name/$pipe]=$(median 3)
        echo "$name -P $pipe rounds (req/s p50 p99): $(tr '\n' ';' <"$WORK/$name-$pipe.txt")"
    done
done

say "durability: kill -9 idmint, restart, the next id is above every id handed out"
before=$(redis-cli -p "$IDMINT_PORT" INCR "$NS")
kill -KILL "$IDMINT_PID"
wait "$IDMINT_PID" 2>/dev/null || true
start_idmint
after=$(redis-cli -p "$IDMINT_PORT" INCR "$NS")
if ((after > before)); then
    DURABLE="yes (last id before kill -9: $before, first after restart: $after)"
else
    DURABLE="NO: $after after $before"
fi
echo "   $DURABLE"

say "summary (redis-benchmark -t incr, key $NS, $CONNS connections, $THREADS client threads, -n $REQUESTS (-P 1) / $PIPELINED_REQUESTS (-P 16); medians of $ROUNDS rounds)"
F="%-34s %12s %9s %9s %14s %14s\n"
printf "$F" "server" "req/s" "p50 ms" "p99 ms" "vs Redis" "vs Redis fsync"
verdicts=()
for pipe in $PIPELINES; do
    for name in idmint redis redis-fsync; do
        k=$name/$pipe
        vs=$(awk -v a="${RPS[$k]}" -v b="${RPS[redis/$pipe]}" 'BEGIN{printf "%.2fx", a/b}')
        vsf=$(awk -v a="${RPS[$k]}" -v b="${RPS[redis-fsync/$pipe]}" 'BEGIN{printf "%.2fx", a/b}')
        printf "$F" "$name -P $pipe" "${RPS[$k]}" "${P50[$k]}" "${P99[$k]}" "$vs" "$vsf"
    done
    rps_ok=$(awk -v a="${RPS[idmint/$pipe]}" -v b="${RPS[redis/$pipe]}" 'BEGIN{print (a >= b) ? "met" : "MISSED"}')
    p99_ok=$(awk -v a="${P99[idmint/$pipe]}" -v b="${P99[redis/$pipe]}" 'BEGIN{print (a <= b) ? "met" : "MISSED"}')
    verdicts+=("-P $pipe: idmint >= 1.0x Redis req/s: $rps_ok; idmint p99 <= Redis p99: $p99_ok")
done
printf '%s\n' "${verdicts[@]}"
echo "idmint ids durable across kill -9: $DURABLE"
