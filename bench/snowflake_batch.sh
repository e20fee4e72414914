#!/usr/bin/env bash
# Snowflake namespaces through the HTTP API (issue 10's benchmark target), one release
# `idmint serve` on the file store at a time, twitter layout, a fixed worker id (so a lease):
#
#   1. batch throughput: GET /v1/ids/flake?count=COUNT from CONNS connections (wrk) for
#      DURATION s; ids/s = requests/s x COUNT, against the per-worker limit of the twitter
#      layout, 4096 ids per ms = 4,096,000 ids/s (one node holds one worker id per namespace,
#      so this is the most one node can issue for it), printed as a ratio;
#   2. single-id latency, lease renewal on versus off, side by side: GET /v1/ids/flake?count=1
#      from LAT_CONNS connections for LAT_DURATION s, p50/p99 from wrk --latency, ROUNDS
#      rounds alternating the configurations so drift hits them alike:
#        off    ttl_ms 3600000, floor_ahead_ms 3000000: no renewal and no floor advance during
#               a run (the first is due after 20 min);
#        10s    the defaults (ttl 10 s, renewed every 3.3 s, floor 5 s ahead);
#        1s     ttl_ms 1000, floor_ahead_ms 500, safety_margin_ms 200: a renewal (a durable redb commit raising the
#               floor) every 333 ms, 10 times the default rate: the worst case.
#      Renewal "off" is the long TTL rather than another authority (multi and upstream store no
#      leases): the node, the store, the generator and its limit check on every id are the same
#      in all three; only the renewals and floor advances differ, which is what is measured.
#
# Usage:  bash bench/snowflake_batch.sh
# Knobs (environment): COUNT=10000 CONNS=8 THREADS=2 DURATION=20 LAT_CONNS=4 LAT_DURATION=15
#   ROUNDS=2 WARMUP=3 QUIET_WAIT=30 IDMINT=path/to/idmint (default: cargo build --release -p idmint-cli into
#   CARGO_TARGET_DIR or target/). Loopback only; wrk shares the machine's cores with the node,
#   as in bench/load/run.sh.
set -euo pipefail

COUNT=${COUNT:-10000}
CONNS=${CONNS:-8}
THREADS=${THREADS:-2}
DURATION=${DURATION:-20}
LAT_CONNS=${LAT_CONNS:-4}
LAT_DURATION=${LAT_DURATION:-15}
ROUNDS=${ROUNDS:-2}
WARMUP=${WARMUP:-3}
LIMIT=4096000 # twitter layout: 12 sequence bits per 1 ms unit, per worker id

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)

QUIET_WAIT=${QUIET_WAIT:-30}
QUIET_SAMPLE=1
TICKS=$(getconf CLK_TCK)
# die, say, wait_quiet (waits up to QUIET_WAIT s for other processes to leave the cores alone).
# shellcheck source=bench/load/lib.sh
source "$HERE/load/lib.sh"

command -v wrk >/dev/null || die "wrk is missing (apt-get install -y wrk)"
if [[ -z "${IDMINT:-}" ]]; then
    say "building idmint (release)"
    (cd "$ROOT" && cargo build --release -p idmint-cli)
    IDMINT="${CARGO_TARGET_DIR:-$ROOT/target}/release/idmint"
fi
[[ -x "$IDMINT" ]] || die "no idmint binary at $IDMINT"

WORK=$(mktemp -d -t idmint-snowflake-bench.XXXXXX)
SERVER_PID=""
stop_server() {
    if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$SERVER_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$SERVER_PID" 2>/dev/null && kill -KILL "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    SERVER_PID=""
}
cleanup() {
    local rc=$?
    stop_server
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_server NAME TTL_MS FLOOR_AHEAD_MS SAFETY_MARGIN_MS: a fresh node on a fresh file store;
# sets ADDR.
start_server() {
    local name=$1 ttl=$2 ahead=$3 margin=$4 dir="$WORK/$1"
    mkdir -p "$dir"
    cat >"$dir/idmint.toml" <<EOF
[server]
auto_create = false
max_count = $(( COUNT > 10000 ? COUNT : 10000 ))

[leases]
ttl_ms = $ttl
floor_ahead_ms = $ahead
safety_margin_ms = $margin

[namespaces.flake]
kind = "snowflake"
layout = "twitter"
worker = 0
EOF
    RUST_LOG=warn "$IDMINT" serve --init --data-dir "$dir/data" --config "$dir/idmint.toml" \
        --http 127.0.0.1:0 >"$dir/stdout" 2>"$dir/stderr" &
    SERVER_PID=$!
    for _ in $(seq 1 300); do
        ADDR=$(sed -n 's|^idmint listening on http://||p' "$dir/stdout" | head -n1)
        [[ -n "$ADDR" ]] && break
        kill -0 "$SERVER_PID" 2>/dev/null || die "$name: idmint exited: $(cat "$dir/stderr")"
        sleep 0.1
    done
    [[ -n "$ADDR" ]] || die "$name: idmint did not listen within 30 s"
    curl -sf "http://$ADDR/v1/ids/flake?count=2" >/dev/null || die "$name: no ids from $ADDR"
}

# Requests/s and the non-2xx count of a wrk report on stdin.
wrk_rps() { awk '/^Requests\/sec:/ {print $2}'; }
wrk_errors() { awk '/Non-2xx or 3xx responses:/ {print $5}'; }
# The latency at percentile $1 (e.g. 99%) of a wrk --latency report, in ms.
wrk_pct() {
    awk -v p="$1" '$1 == p {
        v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v)
        if (u == "us") v /= 1000; else if (u == "s") v *= 1000; else if (u == "m") v *= 60000
        printf "%.3f", v }'
}

say "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); idmint $("$IDMINT" --version 2>/dev/null || echo '?')"

# ---------------------------------------------------------------------------------------------
say "1. batch throughput: count=$COUNT, $CONNS connections, $THREADS wrk threads, ${DURATION}s"
start_server batch 10000 5000 2000
wait_quiet "the batch run"
wrk -t"$THREADS" -c"$CONNS" -d"${WARMUP}s" "http://$ADDR/v1/ids/flake?count=$COUNT" >/dev/null
t0=$(cpu_ticks "$SERVER_PID")
wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" "http://$ADDR/v1/ids/flake?count=$COUNT" \
    >"$WORK/batch.txt"
t1=$(cpu_ticks "$SERVER_PID")
cat "$WORK/batch.txt"
# How busy the node was: below 2 cores, it waited (for the next ms once a unit's 4096
# sequence values were used, or for the client) rather than ran out of CPU.
node_cores=$(awk -v a="$t0" -v b="$t1" -v t="$TICKS" -v d="$DURATION" 'BEGIN{printf "%.2f", (b-a)/t/d}')
echo "   idmint used $node_cores cores"
rps=$(wrk_rps <"$WORK/batch.txt")
batch_errors=$(wrk_errors <"$WORK/batch.txt")
batch_errors=${batch_errors:-0}
stop_server
batch_ids=$(awk -v r="$rps" -v c="$COUNT" 'BEGIN{printf "%.0f", r * c}')
ratio=$(awk -v i="$batch_ids" -v l="$LIMIT" 'BEGIN{printf "%.3f", i / l}')

# ---------------------------------------------------------------------------------------------
say "2. single-id latency, renewal off / 10s / 1s: $LAT_CONNS connections, ${LAT_DURATION}s, $ROUNDS rounds"
declare -A P50 P99 RPS ERRS
configs=("off 3600000 3000000 2000" "10s 10000 5000 2000" "1s 1000 500 200")
for round in $(seq 1 "$ROUNDS"); do
    for c in "${configs[@]}"; do
        read -r name ttl ahead margin <<<"$c"
        start_server "lat-$name-$round" "$ttl" "$ahead" "$margin"
        wait_quiet "renewal $name, round $round"
        wrk -t1 -c"$LAT_CONNS" -d"${WARMUP}s" "http://$ADDR/v1/ids/flake?count=1" >/dev/null
        out="$WORK/lat-$name-$round.txt"
        wrk -t1 -c"$LAT_CONNS" -d"${LAT_DURATION}s" --latency "http://$ADDR/v1/ids/flake?count=1" >"$out"
        # Non-2xx answers (503: the generator reached its floor or its lease's expiry before a
        # renewal came back) are counted, not fatal: they are part of the result.
        errors=$(wrk_errors <"$out")
        errors=${errors:-0}
        stop_server
        P50[$name]+="$(wrk_pct 50% <"$out") "
        P99[$name]+="$(wrk_pct 99% <"$out") "
        RPS[$name]+="$(wrk_rps <"$out") "
        ERRS[$name]+="$errors "
        printf '   round %s, renewal %-3s: %8s req/s  p50 %s ms  p99 %s ms  non-2xx %s\n' \
            "$round" "$name" "$(wrk_rps <"$out")" "$(wrk_pct 50% <"$out")" \
            "$(wrk_pct 99% <"$out")" "$errors"
    done
done

# ---------------------------------------------------------------------------------------------
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END{ if (NR%2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2 }'; }
say "summary"
printf '| measurement | value |\n| --- | --- |\n'
printf '| batch ids/s (count=%s, %s conns) | %s |\n' "$COUNT" "$CONNS" "$batch_ids"
printf '| per-worker limit (twitter) | %s |\n' "$LIMIT"
printf '| ratio | %s (target >= 0.95) |\n' "$ratio"
printf '| non-2xx answers | %s |\n' "$batch_errors"
printf '| idmint CPU during the batch run | %s cores |\n' "$node_cores"
printf '\n| renewal | ttl | req/s (median) | p50 ms | p99 ms (median) | p99 ms (each round) | non-2xx (each round) |\n'
printf '| --- | --- | --- | --- | --- | --- | --- |\n'
for c in "${configs[@]}"; do
    read -r name ttl _ _ <<<"$c"
    printf '| %s | %s ms | %s | %s | %s | %s| %s|\n' "$name" "$ttl" \
        "$(median <<<"${RPS[$name]}")" "$(median <<<"${P50[$name]}")" \
        "$(median <<<"${P99[$name]}")" "${P99[$name]}" "${ERRS[$name]}"
done
