#!/usr/bin/env bash
# Load benchmark of idmint's server against the two classic baselines, on this machine,
# with the same client concurrency for all of them:
#   1. idmint  GET /v1/ids/bench?count=1    (wrk)
#   2. idmint  GET /v1/ids/bench?count=100  (wrk)
#   R. idmint  RESP INCR counter:__rand_int__ (redis-benchmark -t incr, the same settings as Redis)
#   G. idmint  gRPC Next(count=1) (bench/load/client grpc-load, for p50/p99), and NextStream ids/s
#   H. idmint  gRPC Next(count=1) (h2load: a C HTTP/2 load generator, far lighter than a tonic
#              client, so the server is what is measured), errors read from the node's metrics
#   3. Redis   INCR                          (redis-benchmark)
#   4. MariaDB Flickr ticket server          (bench/load/client, Rust + mysql_async)
#   5. idmint resident memory after the load
# then a summary table with the targets met or missed.
#
# Usage:  bash bench/load/run.sh
#         ROUNDS=5 bash bench/load/run.sh            five rounds: medians and ranges (rounds.sh)
#         ROUNDS=4 BUILDS="old=/tmp/idmint-old new=target/release/idmint" bash bench/load/run.sh
#                                                    the builds in turns, four rounds each
# Knobs (environment): CONNS=50 THREADS=2 DURATION=20 WARMUP=5 KEEP_DB=0 QUIET_WAIT=30 EXTRA=1
#   IDMINT=PATH serves that binary instead of building target/release/idmint. MARIADB=0 skips
#   the ticket server (its row then reads 0).
#   DURATION/WARMUP are seconds per measurement. KEEP_DB=1 keeps the idmint_bench database.
#   Before each measurement the script waits up to QUIET_WAIT s for other processes (builds,
#   tests) to leave the 2 cores alone, and reports the cores they used during each run
#   ("other cores"): a run with other cores > 0.1 is not a clean measurement.
#   EXTRA=1 adds two informational idmint runs of 10 s (no target): count=1000 at CONNS
#   connections (ids/s with bigger batches) and count=1 at 4 connections, 1 thread (latency
#   at a lighter load).
#
# Loopback only. Starts (and stops) only the idmint server; the system Redis and MariaDB are
# used as they are (started if they are not running, and then left running).
set -euo pipefail
if [[ ${ROUNDS:-1} -gt 1 ]]; then
    exec bash "$(dirname "${BASH_SOURCE[0]}")/rounds.sh"
fi
QUIET_SAMPLE=2 # seconds per CPU sample while waiting for a quiet machine
# shellcheck source=bench/load/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CONNS=${CONNS:-50}
THREADS=${THREADS:-2}
DURATION=${DURATION:-20}
WARMUP=${WARMUP:-5}
KEEP_DB=${KEEP_DB:-0}
QUIET_WAIT=${QUIET_WAIT:-30}
EXTRA=${EXTRA:-1}
NS=bench

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CLIENT_DIR="$HERE/client"
TICKS=$(getconf CLK_TCK)


WORK=""
SERVER_PID=""
cleanup() {
    local rc=$?
    if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$SERVER_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$SERVER_PID" 2>/dev/null && kill -KILL "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    [[ -n "$WORK" && -d "$WORK" ]] && rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------------------------
say "prerequisites"
SUDO=""
[[ $(id -u) -eq 0 ]] || SUDO="sudo"
need_pkgs=()
command -v wrk >/dev/null || need_pkgs+=(wrk)
command -v redis-benchmark >/dev/null || need_pkgs+=(redis-tools)
command -v redis-server >/dev/null || need_pkgs+=(redis-server)
command -v h2load >/dev/null || need_pkgs+=(nghttp2-client)
command -v mariadb >/dev/null || command -v mysql >/dev/null || need_pkgs+=(mariadb-client)
if ((${#need_pkgs[@]})); then
    echo "installing: ${need_pkgs[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi
for t in wrk redis-benchmark redis-cli cargo; do
    command -v "$t" >/dev/null || die "$t is missing (apt-get install -y wrk redis-tools; cargo from rustup)"
done
MYSQL=$(command -v mariadb || command -v mysql) || die "no mariadb/mysql client (apt-get install -y mariadb-client)"

# Redis at 127.0.0.1:6379
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    command -v redis-server >/dev/null || die "Redis is not running on 127.0.0.1:6379 and redis-server is not installed (apt-get install -y redis-server)"
    echo "Redis not running: starting redis-server on 127.0.0.1:6379 (left running afterwards)"
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null
    for _ in $(seq 1 50); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.1; done
    redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 || die "Redis did not start on 127.0.0.1:6379"
fi

# MariaDB at 127.0.0.1:3306, root with an empty password
if [[ "${MARIADB:-1}" != 0 ]] && ! sql -e 'SELECT 1' >/dev/null 2>&1; then
    if [[ -x /usr/sbin/mariadbd ]] && ! pidof mariadbd >/dev/null; then
        echo "MariaDB not running: starting /usr/sbin/mariadbd (left running afterwards)"
        $SUDO mkdir -p /run/mysqld
        $SUDO chown mysql:mysql /run/mysqld 2>/dev/null || true
        $SUDO start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
        for _ in $(seq 1 60); do sql -e 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.5; done
    fi
    sql -e 'SELECT 1' >/dev/null 2>&1 ||
        die "MariaDB does not answer on 127.0.0.1:3306 as root with an empty password (installed: $([[ -x /usr/sbin/mariadbd ]] && echo yes || echo 'no: apt-get install -y mariadb-server'); running: $(pidof mariadbd >/dev/null && echo yes || echo no))"
fi
echo "wrk: $(wrk --version 2>&1 | head -1 | cut -c1-40)"
echo "redis: $(redis-cli -h 127.0.0.1 -p 6379 info server | tr -d '\r' | awk -F: '/^redis_version/{print $2}'), $(redis-benchmark --version)"
[[ "${MARIADB:-1}" == 0 ]] || echo "mariadb: $(sql -e 'SELECT VERSION()')"

# ---------------------------------------------------------------------------------------------
say "building (one at a time: 2 cores)"
if [[ -z "${IDMINT:-}" ]]; then
    (cd "$ROOT" && cargo build --release -p idmint-cli 2>&1 | tail -n 2)
    IDMINT="$ROOT/target/release/idmint"
fi
[[ -x "$IDMINT" ]] || die "no $IDMINT after the build"
CARGO_TARGET_DIR="$CLIENT_DIR/target" cargo build --release --manifest-path "$CLIENT_DIR/Cargo.toml" 2>&1 | tail -n 2
TICKET_LOAD="$CLIENT_DIR/target/release/idmint-load-client"
[[ -x "$TICKET_LOAD" ]] || die "no $TICKET_LOAD after the build"
GRPC_LOAD="$CLIENT_DIR/target/release/grpc-load"
[[ -x "$GRPC_LOAD" ]] || die "no $GRPC_LOAD after the build"

# ---------------------------------------------------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/idmint-load.XXXXXX")
cat >"$WORK/report.lua" <<'EOF'
-- Prints one machine-readable line at the end of a wrk run (latencies in microseconds).
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRK requests=%d duration_us=%d p50_us=%d p90_us=%d p99_us=%d p999_us=%d max_us=%d mean_us=%.1f err_connect=%d err_read=%d err_write=%d err_status=%d err_timeout=%d\n",
    summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max, latency.mean,
    e.connect, e.read, e.write, e.status, e.timeout))
end
EOF

# CPU ticks (user+system) used so far by a process.
# Cores used by PID over a run: (ticks after - ticks before) / CLK_TCK / seconds.
cores_used() { awk -v a="$1" -v b="$2" -v t="$TICKS" -v s="$3" 'BEGIN{ if (s>0) printf "%.2f", (b-a)/t/s; else print "?" }'; }
# CPU ticks spent in processes so far, machine-wide (user+nice+system; not irq/softirq/steal,
# which /proc/PID/stat does not charge to any process).
# CPU seconds used so far by this shell's finished children (the load clients), from `times`,
# into CHILD_SECS. Must run in the main shell (not in $(...)): a subshell has its own children.
# Cores used by other processes (not server, not client) over a run.
others_cores() { # all_before all_after server_before server_after client_secs_before client_secs_after seconds
    awk -v a0="$1" -v a1="$2" -v s0="$3" -v s1="$4" -v c0="$5" -v c1="$6" -v t="$TICKS" -v d="$7" \
        'BEGIN{ o=((a1-a0)-(s1-s0))/t-(c1-c0); if (d>0) o/=d; if (o<0) o=0; printf "%.2f", o }'
}
# Waits (up to QUIET_WAIT s) for the machine to be quiet: other processes skew the numbers.

say "starting idmint (fresh data dir, ephemeral port)"
mkdir -p "$WORK/data"
RUST_LOG=${RUST_LOG:-info} "$IDMINT" serve --data-dir "$WORK/data" --http 127.0.0.1:0 --resp 127.0.0.1:0 --grpc 127.0.0.1:0 >"$WORK/server.out" 2>"$WORK/server.err" &
SERVER_PID=$!
BASE=""
for _ in $(seq 1 100); do
    BASE=$(sed -n 's/^idmint listening on \(http:[^ ]*\).*/\1/p' "$WORK/server.out" | head -n1)
    [[ -n "$BASE" ]] && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/server.err" >&2; die "idmint exited at start"; }
    sleep 0.1
done
[[ -n "$BASE" ]] || die "idmint did not report its address"
RESP_PORT=""
for _ in $(seq 1 100); do
    RESP_PORT=$(sed -n 's/^idmint RESP listening on [^ ]*:\([0-9]*\).*/\1/p' "$WORK/server.out" | head -n1)
    [[ -n "$RESP_PORT" ]] && break
    sleep 0.1
done
[[ -n "$RESP_PORT" ]] || die "idmint did not report its RESP address"
GRPC_URL=$(sed -n 's/^idmint gRPC listening on \([^ ]*\).*/http:\/\/\1/p' "$WORK/server.out" | head -n1)
[[ -n "$GRPC_URL" ]] || die "idmint did not report its gRPC address"
for _ in $(seq 1 100); do
    curl -fsS "$BASE/healthz" >/dev/null 2>&1 && break
    sleep 0.1
done
curl -fsS "$BASE/healthz" >/dev/null || die "idmint $BASE/healthz does not answer"
echo "idmint pid $SERVER_PID at $BASE, RESP on 127.0.0.1:$RESP_PORT, gRPC at $GRPC_URL"
echo "NOTE: client and server share this machine's $(nproc) cores ($(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -n1)); every client below runs with $CONNS connections on $THREADS threads, loopback."

# wrk_run NAME PATH [CONNS THREADS DURATION WARMUP] -> sets R_* variables
wrk_run() {
    local name=$1 path=$2 url="$BASE$2"
    local CONNS=${3:-$CONNS} THREADS=${4:-$THREADS} DURATION=${5:-$DURATION} WARMUP=${6:-$WARMUP}
    echo "-- $name: warm-up ${WARMUP}s"
    wrk -t"$THREADS" -c"$CONNS" -d"${WARMUP}s" "$url" >/dev/null
    echo "-- $name: wrk -t$THREADS -c$CONNS -d${DURATION}s --latency $url"
    local t0 t1 out m0 m1 c0 c1
    wait_quiet "$name"
    children_secs; c0=$CHILD_SECS; m0=$(machine_ticks); t0=$(cpu_ticks "$SERVER_PID")
    wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency -s "$WORK/report.lua" "$url" >"$WORK/wrk.out"
    t1=$(cpu_ticks "$SERVER_PID"); m1=$(machine_ticks); children_secs; c1=$CHILD_SECS
    out=$(cat "$WORK/wrk.out")
    echo "$out" | grep -E 'Requests/sec|Transfer/sec|Non-2xx|Socket errors|^ +(50|99)%' | sed 's/^/   /'
    local line; line=$(echo "$out" | grep '^WRK ')
    local req dur p99 st
    req=$(echo " $line" | kv requests); dur=$(echo " $line" | kv duration_us)
    p99=$(echo " $line" | kv p99_us); st=$(echo " $line" | kv err_status)
    local errs=$(( $(echo " $line" | kv err_connect) + $(echo " $line" | kv err_read) + $(echo " $line" | kv err_write) + st + $(echo " $line" | kv err_timeout) ))
    R_RPS=$(awk -v r="$req" -v d="$dur" 'BEGIN{printf "%.0f", r/(d/1e6)}')
    R_P99=$(awk -v p="$p99" 'BEGIN{printf "%.3f", p/1000}')
    R_P50=$(awk -v p="$(echo " $line" | kv p50_us)" 'BEGIN{printf "%.3f", p/1000}')
    R_ERR=$errs
    local secs; secs=$(awk -v d="$dur" 'BEGIN{print d/1e6}')
    R_CPU=$(cores_used "$t0" "$t1" "$secs")
    R_CLI=$(awk -v a="$c0" -v b="$c1" -v d="$secs" 'BEGIN{printf "%.2f", (b-a)/d}')
    R_OTH=$(others_cores "$m0" "$m1" "$t0" "$t1" "$c0" "$c1" "$secs")
    echo "   => $R_RPS req/s, p50 $R_P50 ms, p99 $R_P99 ms, errors $R_ERR; cores used: idmint $R_CPU, wrk $R_CLI, other processes $R_OTH"
    ((errs == 0)) || echo "   WARNING: $errs errors (non-2xx, socket) during $name"
}

# rb_run NAME PORT PID: redis-benchmark -t incr against PORT (the server's PID for its CPU), with
# -n sized from a short probe so the run lasts about DURATION s -> sets B_* variables. The same
# function measures Redis and idmint's RESP front-end, so both get exactly the same client.
rb_run() {
    local name=$1 port=$2 pid=$3
    local probe probe_rps n t0 t1 m0 m1 c0 c1 s0 s1 csv line secs
    probe=$(redis-benchmark -h 127.0.0.1 -p "$port" -t incr -c "$CONNS" --threads "$THREADS" -n 200000 --csv | tail -n1)
    probe_rps=$(echo "$probe" | awk -F'","' '{print $2+0}')
    n=$(awk -v r="$probe_rps" -v d="$DURATION" 'BEGIN{n=int(r*d); if (n<200000) n=200000; print n}')
    echo "-- $name: redis-benchmark -p $port -t incr -c $CONNS --threads $THREADS -n $n --csv (probe: $probe_rps req/s)"
    wait_quiet "$name"
    children_secs; c0=$CHILD_SECS; m0=$(machine_ticks); t0=$(cpu_ticks "$pid"); s0=$(date +%s.%N)
    redis-benchmark -h 127.0.0.1 -p "$port" -t incr -c "$CONNS" --threads "$THREADS" -n "$n" --csv >"$WORK/rb.csv"
    t1=$(cpu_ticks "$pid"); m1=$(machine_ticks); s1=$(date +%s.%N); children_secs; c1=$CHILD_SECS
    csv=$(cat "$WORK/rb.csv")
    secs=$(awk -v a="$s0" -v b="$s1" 'BEGIN{print b-a}')
    echo "$csv" | sed 's/^/   /'
    line=$(echo "$csv" | grep -i '"INCR"')
    # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    B_RPS=$(echo "$line" | awk -F'","' '{printf "%.0f", $2}')
    B_P50=$(echo "$line" | awk -F'","' '{printf "%.3f", $5}')
    B_P99=$(echo "$line" | awk -F'","' '{printf "%.3f", $7}')
    B_CPU=$(cores_used "$t0" "$t1" "$secs")
    B_CLI=$(awk -v a="$c0" -v b="$c1" -v d="$secs" 'BEGIN{printf "%.2f", (b-a)/d}')
    B_OTH=$(others_cores "$m0" "$m1" "$t0" "$t1" "$c0" "$c1" "$secs")
    echo "   => $B_RPS req/s, p50 $B_P50 ms, p99 $B_P99 ms; cores used: server $B_CPU, redis-benchmark $B_CLI, other processes $B_OTH"
}

say "1. idmint GET /v1/ids/$NS?count=1"
# First request creates the namespace.
curl -fsS "$BASE/v1/ids/$NS?count=1" >/dev/null || die "first request failed: $(curl -sS "$BASE/v1/ids/$NS?count=1")"
wrk_run "idmint count=1" "/v1/ids/$NS?count=1"
I1_RPS=$R_RPS I1_P99=$R_P99 I1_P50=$R_P50 I1_ERR=$R_ERR I1_CPU=$R_CPU I1_CLI=$R_CLI I1_OTH=$R_OTH

say "2. idmint GET /v1/ids/$NS?count=100"
sample=$(curl -fsS "$BASE/v1/ids/$NS?count=100")
nids=$(printf '%s' "$sample" | grep -o '"[0-9][0-9]*"' | sort -u | wc -l)
echo "   sample response holds $nids distinct ids (want 100): ${sample:0:80}..."
[[ "$nids" -eq 100 ]] || die "a count=100 response does not hold 100 distinct ids"
wrk_run "idmint count=100" "/v1/ids/$NS?count=100"
I100_RPS=$R_RPS I100_P99=$R_P99 I100_P50=$R_P50 I100_ERR=$R_ERR I100_CPU=$R_CPU I100_CLI=$R_CLI I100_OTH=$R_OTH
I100_IDS=$((I100_RPS * 100))

say "R. idmint RESP INCR (redis-benchmark -t incr, key counter:__rand_int__)"
rb_run "idmint RESP INCR" "$RESP_PORT" "$SERVER_PID"
IR_RPS=$B_RPS IR_P50=$B_P50 IR_P99=$B_P99 IR_CPU=$B_CPU IR_CLI=$B_CLI IR_OTH=$B_OTH

say "G. idmint gRPC Next(count=1) (grpc-load, one HTTP/2 connection per client)"
echo "-- $GRPC_LOAD --url $GRPC_URL --namespace $NS --conns $CONNS --threads $THREADS --warmup $WARMUP --duration $DURATION"
wait_quiet "idmint gRPC Next"
children_secs; c0=$CHILD_SECS; m0=$(machine_ticks); t0=$(cpu_ticks "$SERVER_PID")
"$GRPC_LOAD" --url "$GRPC_URL" --namespace "$NS" --conns "$CONNS" --threads "$THREADS" --warmup "$WARMUP" --duration "$DURATION" >"$WORK/grpc.out"
t1=$(cpu_ticks "$SERVER_PID"); m1=$(machine_ticks); children_secs; c1=$CHILD_SECS
gline=" $(cat "$WORK/grpc.out")"
echo "  $gline"
G_RPS=$(echo "$gline" | kv rps); G_P50=$(echo "$gline" | kv p50_ms); G_P99=$(echo "$gline" | kv p99_ms)
G_ERR=$(echo "$gline" | kv errors)
gsecs=$(awk -v s="$(echo "$gline" | kv seconds)" -v w="$WARMUP" 'BEGIN{print s+w}')
G_CPU=$(cores_used "$t0" "$t1" "$gsecs")
G_CLI=$(awk -v a="$c0" -v b="$c1" -v d="$gsecs" 'BEGIN{printf "%.2f", (b-a)/d}')
G_OTH=$(others_cores "$m0" "$m1" "$t0" "$t1" "$c0" "$c1" "$gsecs")
echo "   => $G_RPS req/s, p50 $G_P50 ms, p99 $G_P99 ms, errors $G_ERR; cores used (incl. warm-up): idmint $G_CPU, grpc-load $G_CLI, other processes $G_OTH"

say "H. idmint gRPC Next(count=1) (h2load, $CONNS connections, one stream each)"
# One gRPC message: no compression, length 9, NextRequest{namespace: "bench", count: 1}.
printf '\x00\x00\x00\x00\x09\x0a\x05bench\x10\x01' >"$WORK/next.grpc"
errors_total() { curl -fsS "$BASE/metrics" | awk '/^idmint_errors_total/{s+=$NF} END{printf "%d", s}'; }
wait_quiet "idmint gRPC Next (h2load)"
e0=$(errors_total)
children_secs; c0=$CHILD_SECS; m0=$(machine_ticks); t0=$(cpu_ticks "$SERVER_PID")
h2load -c "$CONNS" -m 1 -t "$THREADS" -D "$DURATION" --warm-up-time "$WARMUP" \
    -H 'content-type: application/grpc' -H 'te: trailers' -d "$WORK/next.grpc" \
    "${GRPC_URL}/idmint.v1.Idmint/Next" >"$WORK/h2load.out" 2>&1
t1=$(cpu_ticks "$SERVER_PID"); m1=$(machine_ticks); children_secs; c1=$CHILD_SECS
e1=$(errors_total)
grep -E '^finished|^requests:|^status codes:|time for request' -A1 "$WORK/h2load.out" | sed 's/^/   /' | head -8
H_RPS=$(sed -n 's/^finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p' "$WORK/h2load.out" | awk '{printf "%.0f", $1}')
H_MEAN=$(awk '/^time for request:/{getline; printf "%s", $4}' "$WORK/h2load.out")
H_FAILED=$(sed -n 's/^requests:.* \([0-9]*\) failed, \([0-9]*\) errored.*/\1 \2/p' "$WORK/h2load.out" | awk '{print $1 + $2}')
H_ERR=$((e1 - e0))
hsecs=$(awk -v d="$DURATION" -v w="$WARMUP" 'BEGIN{print d+w}')
H_CPU=$(cores_used "$t0" "$t1" "$hsecs")
H_CLI=$(awk -v a="$c0" -v b="$c1" -v d="$hsecs" 'BEGIN{printf "%.2f", (b-a)/d}')
H_OTH=$(others_cores "$m0" "$m1" "$t0" "$t1" "$c0" "$c1" "$hsecs")
echo "   => $H_RPS req/s, mean $H_MEAN; h2load failures $H_FAILED, idmint errors $H_ERR; cores used: idmint $H_CPU, h2load $H_CLI, other processes $H_OTH"
[[ "$H_FAILED" == 0 && "$H_ERR" == 0 ]] || die "gRPC Next under h2load failed ($H_FAILED failed requests, $H_ERR errors counted by idmint)"

say "G. idmint gRPC NextStream (2 streams of 20M ids, chunks of 10,000)"
wait_quiet "idmint gRPC NextStream"
"$GRPC_LOAD" --url "$GRPC_URL" --namespace "$NS" --mode stream --conns 2 --threads "$THREADS" --total 20000000 --chunk 10000 >"$WORK/stream.out"
sline=" $(cat "$WORK/stream.out")"
echo "  $sline"
S_IDS=$(echo "$sline" | kv ids_per_s)

if [[ "$EXTRA" == 1 ]]; then
    say "extra (informational). idmint GET /v1/ids/$NS?count=1000, $CONNS connections"
    wrk_run "idmint count=1000" "/v1/ids/$NS?count=1000" "$CONNS" "$THREADS" 10 2
    X1000_RPS=$R_RPS X1000_P99=$R_P99 X1000_P50=$R_P50 X1000_CPU=$R_CPU X1000_CLI=$R_CLI X1000_OTH=$R_OTH
    X1000_IDS=$((X1000_RPS * 1000))
    say "extra (informational). idmint GET /v1/ids/$NS?count=1, 4 connections, 1 thread (lighter load)"
    wrk_run "idmint count=1 c=4" "/v1/ids/$NS?count=1" 4 1 10 2
    XL_RPS=$R_RPS XL_P99=$R_P99 XL_P50=$R_P50 XL_CPU=$R_CPU XL_CLI=$R_CLI XL_OTH=$R_OTH
fi

say "5. idmint resident memory after the load"
VMRSS_KB=$(awk '/^VmRSS:/{print $2}' "/proc/$SERVER_PID/status")
VMHWM_KB=$(awk '/^VmHWM:/{print $2}' "/proc/$SERVER_PID/status")
THREADS_SRV=$(awk '/^Threads:/{print $2}' "/proc/$SERVER_PID/status")
RSS_MB=$(awk -v k="$VMRSS_KB" 'BEGIN{printf "%.1f", k/1024}')
HWM_MB=$(awk -v k="$VMHWM_KB" 'BEGIN{printf "%.1f", k/1024}')
echo "   VmRSS $RSS_MB MB, VmHWM (peak) $HWM_MB MB, $THREADS_SRV threads"
curl -fsS "$BASE/v1/namespaces/$NS" | head -c 600; echo

say "stopping idmint"
kill -TERM "$SERVER_PID"
for _ in $(seq 1 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
wait "$SERVER_PID" 2>/dev/null || true
SERVER_PID=""
sed -e 's/\x1b\[[0-9;]*m//g' -e 's/^/   /' "$WORK/server.out"

say "3. Redis INCR (redis-benchmark)"
REDIS_PID=$(redis-cli -h 127.0.0.1 -p 6379 info server | tr -d '\r' | awk -F: '/^process_id/{print $2}')
rb_run "Redis INCR" 6379 "$REDIS_PID"
R_RPS_REDIS=$B_RPS R_P50_REDIS=$B_P50 R_P99_REDIS=$B_P99 R_CPU_REDIS=$B_CPU R_CLI_REDIS=$B_CLI R_OTH_REDIS=$B_OTH

M_RPS=0 M_P50=- M_P99=- M_CPU=- M_CLI=- M_OTH=0 M_ERR=0 FLUSH=-
if [[ "${MARIADB:-1}" != 0 ]]; then
say "4. MariaDB ticket server (Flickr Tickets64, REPLACE + LAST_INSERT_ID, autocommit)"
sql -e "CREATE DATABASE IF NOT EXISTS idmint_bench;
CREATE TABLE IF NOT EXISTS idmint_bench.Tickets64 (
  id bigint(20) unsigned NOT NULL auto_increment,
  stub char(1) NOT NULL default '',
  PRIMARY KEY (id),
  UNIQUE KEY stub (stub)
) ENGINE=InnoDB;"
FLUSH=$(sql -e 'SELECT @@innodb_flush_log_at_trx_commit')
SYNC_BINLOG=$(sql -e 'SELECT @@sync_binlog')
LOG_BIN=$(sql -e 'SELECT @@log_bin')
AUTOCOMMIT=$(sql -e 'SELECT @@global.autocommit')
echo "   innodb_flush_log_at_trx_commit=$FLUSH (1 = fsync the redo log at every commit), log_bin=$LOG_BIN, sync_binlog=$SYNC_BINLOG, autocommit=$AUTOCOMMIT (server config left as it is)"
MARIADB_PID=$(pidof mariadbd 2>/dev/null | awk '{print $1}') || true
echo "-- $TICKET_LOAD --conns $CONNS --threads $THREADS --warmup $WARMUP --duration $DURATION (one connection per client, one multi-statement round trip per id)"
wait_quiet "MariaDB ticket server"
children_secs; c0=$CHILD_SECS; m0=$(machine_ticks); t0=$( [[ -n "$MARIADB_PID" ]] && cpu_ticks "$MARIADB_PID" || echo 0)
"$TICKET_LOAD" --url "mysql://root@127.0.0.1:3306/idmint_bench" --conns "$CONNS" --threads "$THREADS" --warmup "$WARMUP" --duration "$DURATION" >"$WORK/ticket.out"
t1=$( [[ -n "$MARIADB_PID" ]] && cpu_ticks "$MARIADB_PID" || echo 0); m1=$(machine_ticks); children_secs; c1=$CHILD_SECS
mout=$(cat "$WORK/ticket.out")
echo "   $mout"
mline=" $mout"
M_RPS=$(echo "$mline" | kv rps | awk '{printf "%.0f", $1}')
M_P99=$(echo "$mline" | kv p99_ms)
M_P50=$(echo "$mline" | kv p50_ms)
M_ERR=$(echo "$mline" | kv errors)
M_SECS=$(echo "$mline" | kv seconds)
msecs=$(awk -v s="$M_SECS" -v w="$WARMUP" 'BEGIN{print s+w}')
M_CPU=$( [[ -n "$MARIADB_PID" ]] && cores_used "$t0" "$t1" "$msecs" || echo "?")
M_CLI=$(awk -v a="$c0" -v b="$c1" -v d="$msecs" 'BEGIN{printf "%.2f", (b-a)/d}')
M_OTH=$(others_cores "$m0" "$m1" "$t0" "$t1" "$c0" "$c1" "$msecs")
M_RETRY=$(echo "$mline" | kv deadlock_retries)
echo "   => $M_RPS req/s, p50 $M_P50 ms, p99 $M_P99 ms, errors $M_ERR, InnoDB deadlocks retried $M_RETRY; cores used (incl. warm-up): mariadbd $M_CPU, client $M_CLI, other processes $M_OTH"
if [[ "$KEEP_DB" != 1 ]]; then sql -e 'DROP DATABASE idmint_bench'; fi
fi

# ---------------------------------------------------------------------------------------------
say "summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores shared by client and server, $CONNS connections, ${DURATION}s per run)"
F='%-34s %11s %9s %9s %12s %7s %7s %8s\n'
# 'others' above 0.1 core: the row was measured while other processes used the CPU (marked *).
printf "$F" "system" "requests/s" "p50 ms" "p99 ms" "ids/s" "server" "client" "others"
printf "$F" "" "" "" "" "" "cores" "cores" "cores"
printf "$F" "idmint GET count=1 (wrk)" "$I1_RPS" "$I1_P50" "$I1_P99" "$I1_RPS" "$I1_CPU" "$I1_CLI" "$(mark "$I1_OTH")"
printf "$F" "idmint GET count=100 (wrk)" "$I100_RPS" "$I100_P50" "$I100_P99" "$I100_IDS" "$I100_CPU" "$I100_CLI" "$(mark "$I100_OTH")"
printf "$F" "idmint RESP INCR (redis-benchmark)" "$IR_RPS" "$IR_P50" "$IR_P99" "$IR_RPS" "$IR_CPU" "$IR_CLI" "$(mark "$IR_OTH")"
printf "$F" "idmint gRPC Next count=1" "$G_RPS" "$G_P50" "$G_P99" "$G_RPS" "$G_CPU" "$G_CLI" "$(mark "$G_OTH")"
printf "$F" "idmint gRPC Next count=1 (h2load)" "$H_RPS" "-" "-" "$H_RPS" "$H_CPU" "$H_CLI" "$(mark "$H_OTH")"
printf "$F" "idmint gRPC NextStream (2 streams)" "-" "-" "-" "$S_IDS" "-" "-" "-"
printf "$F" "Redis INCR (redis-benchmark)" "$R_RPS_REDIS" "$R_P50_REDIS" "$R_P99_REDIS" "$R_RPS_REDIS" "$R_CPU_REDIS" "$R_CLI_REDIS" "$(mark "$R_OTH_REDIS")"
printf "$F" "MariaDB ticket server (flush=$FLUSH)" "$M_RPS" "$M_P50" "$M_P99" "$M_RPS" "$M_CPU" "$M_CLI" "$(mark "$M_OTH")"
if [[ "$EXTRA" == 1 ]]; then
    printf "$F" "(info) idmint count=1000, 10s" "$X1000_RPS" "$X1000_P50" "$X1000_P99" "$X1000_IDS" "$X1000_CPU" "$X1000_CLI" "$(mark "$X1000_OTH")"
    printf "$F" "(info) idmint count=1, 4 conns, 10s" "$XL_RPS" "$XL_P50" "$XL_P99" "$XL_RPS" "$XL_CPU" "$XL_CLI" "$(mark "$XL_OTH")"
fi
echo "idmint RSS after load: VmRSS $RSS_MB MB, VmHWM $HWM_MB MB"
echo

verdict() { if awk -v v="$1" -v t="$3" -v op="$2" 'BEGIN{exit !((op==">=" && v>=t) || (op=="<" && v<t))}'; then echo "MET"; else echo "MISSED"; fi; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b>0) printf "%.2f", a/b; else print "inf" }'; }
R1=$(ratio "$I1_RPS" "$R_RPS_REDIS")
R2=$(ratio "$I1_RPS" "$M_RPS")
printf '%-52s %14s %10s  %s\n' "target" "value" "goal" "verdict"
RR=$(ratio "$IR_RPS" "$R_RPS_REDIS")
printf '%-52s %14s %10s  %s\n' "idmint RESP INCR req/s / Redis INCR req/s" "$RR" ">= 1.0" "$(verdict "$RR" ">=" 1.0)"
printf '%-52s %14s %10s  %s\n' "idmint RESP INCR p99 ms (Redis: $R_P99_REDIS)" "$IR_P99" "<= Redis" "$(verdict "$IR_P99" "<" "$(awk -v r="$R_P99_REDIS" 'BEGIN{print r+0.0005}')")"
printf '%-52s %14s %10s  %s\n' "idmint count=1 req/s / Redis INCR req/s" "$R1" ">= 0.5" "$(verdict "$R1" ">=" 0.5)"
GR=$(ratio "$H_RPS" "$R_RPS_REDIS")
printf '%-52s %14s %10s  %s\n' "idmint gRPC Next req/s (h2load) / Redis INCR req/s" "$GR" ">= 0.8" "$(verdict "$GR" ">=" 0.8)"
printf '%-52s %14s %10s  %s\n' "(info) idmint gRPC Next req/s (grpc-load) / Redis" "$(ratio "$G_RPS" "$R_RPS_REDIS")" "-" "-"
printf '%-52s %14s %10s  %s\n' "idmint count=1 p99 ms (Redis: $R_P99_REDIS)" "$I1_P99" "<= Redis" "$(verdict "$I1_P99" "<" "$(awk -v r="$R_P99_REDIS" 'BEGIN{print r+0.0005}')")"
printf '%-52s %14s %10s  %s\n' "idmint count=1 req/s / MariaDB ticket req/s" "$R2" ">= 10" "$(verdict "$R2" ">=" 10)"
printf '%-52s %14s %10s  %s\n' "idmint count=100 ids/s" "$I100_IDS" ">= 10M" "$(verdict "$I100_IDS" ">=" 10000000)"
printf '%-52s %14s %10s  %s\n' "idmint count=1 p99 ms (at full load)" "$I1_P99" "< 1" "$(verdict "$I1_P99" "<" 1)"
printf '%-52s %14s %10s  %s\n' "idmint RSS MB after load (VmRSS)" "$RSS_MB" "< 50" "$(verdict "$RSS_MB" "<" 50)"
printf '%-52s %14s %10s  %s\n' "idmint peak RSS MB (VmHWM)" "$HWM_MB" "< 50" "$(verdict "$HWM_MB" "<" 50)"
total_err=$((I1_ERR + I100_ERR + M_ERR + G_ERR))
echo
echo "errors: idmint count=1 $I1_ERR, idmint count=100 $I100_ERR, gRPC $G_ERR, MariaDB $M_ERR"
if awk -v a="$I1_OTH" -v b="$I100_OTH" -v c="$R_OTH_REDIS" -v d="$M_OTH" -v e="$IR_OTH" 'BEGIN{exit !(a>0.1||b>0.1||c>0.1||d>0.1||e>0.1)}'; then
    echo "WARNING: other processes used CPU during some runs (column 'others'): those numbers are low; run again on a quiet machine"
fi
((total_err == 0)) || echo "WARNING: some requests failed; the numbers above count only successful ones for MariaDB, all responses for wrk"
# One machine-readable line for rounds.sh.
echo "ROUND http1_rps=$I1_RPS http1_p99=$I1_P99 http100_ids=$I100_IDS resp_rps=$IR_RPS resp_p99=$IR_P99 grpc_h2load_rps=$H_RPS grpc_load_rps=$G_RPS stream_ids=$S_IDS redis_rps=$R_RPS_REDIS redis_p99=$R_P99_REDIS"
