#!/usr/bin/env bash
# The Redis authority's benchmark targets (docs/backends.md, "Redis 7 and Valkey"):
#
#   A. reservations per second of the Redis authority next to a bare INCRBY on the same private
#      redis-server with appendfsync always (target: at least 0.5x), from
#      crates/store/examples/redis_bench.rs;
#   B. ids per authority round trip of an idmint node on that authority with the default
#      adaptive cache, under wrk (target: at least 100,000): Δ idmint_ids_served_total over
#      Δ idmint_refills_total in the measured window, from the node's /metrics.
#
# Every server is private (a free port, a temporary directory) and stopped at the end; the
# shared Redis on 6379 is never used. Settings (defaults shown):
#   CLIENTS=1,8 DURATION=2 ROUNDS=5 COUNT=1000 (part A); CONNS=50 THREADS=2 WARMUP=5 WINDOW=20
#   IDS_PER_REQUEST=100 (part B). IDMINT=path/to/idmint skips building the binary (it must
#   have the redis feature, on by default).
set -euo pipefail
cd "$(dirname "$0")/../.."
CLIENTS=${CLIENTS:-1,8} DURATION=${DURATION:-2} ROUNDS=${ROUNDS:-5} COUNT=${COUNT:-1000}
CONNS=${CONNS:-50} THREADS=${THREADS:-2} WARMUP=${WARMUP:-5} WINDOW=${WINDOW:-20}
IDS_PER_REQUEST=${IDS_PER_REQUEST:-100}
die() { printf '\n%s: ERROR: %s\n' "$(basename "$0")" "$*" >&2; exit 1; }
for tool in redis-server wrk curl; do
    command -v "$tool" >/dev/null || die "$tool is missing (Debian: apt-get install redis-server wrk curl)"
done

WORK=$(mktemp -d /tmp/idmint-redis-bench.XXXXXX)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

echo "== build (release)"
cargo build --release -q -p idmint-store --features redis --example redis_bench
if [[ -z "${IDMINT:-}" ]]; then
    cargo build --release -q -p idmint-cli
    IDMINT=target/release/idmint
fi

echo "== A. reservations/s: the Redis authority next to INCRBY"
target/release/examples/redis_bench --clients "$CLIENTS" --duration "$DURATION" --rounds "$ROUNDS" --count "$COUNT"

echo "== B. ids per authority round trip: an idmint node on Redis, adaptive cache"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$WORK/redis" "$WORK/node"
redis-server --port "$PORT" --bind 127.0.0.1 --dir "$WORK/redis" --appendonly yes \
    --appendfsync always --save "" --maxmemory-policy noeviction --daemonize no \
    --logfile "$WORK/redis.log" &
PIDS+=($!)
for _ in $(seq 1 100); do grep -q "Ready to accept connections" "$WORK/redis.log" 2>/dev/null && break; sleep 0.1; done
grep -q "Ready to accept connections" "$WORK/redis.log" || die "redis-server did not start: $(tail -5 "$WORK/redis.log")"
printf '[server]\ndata_dir = "%s"\n\n[authority]\nkind = "redis"\nurl = "redis://127.0.0.1:%s"\n' \
    "$WORK/node" "$PORT" >"$WORK/node.toml"
RUST_LOG=${RUST_LOG:-warn} "$IDMINT" serve --config "$WORK/node.toml" --http 127.0.0.1:0 \
    >"$WORK/node.out" 2>"$WORK/node.err" &
PIDS+=($!)
BASE=""
for _ in $(seq 1 300); do
    BASE=$(sed -n 's/^idmint listening on \(http:[^ ]*\).*/\1/p' "$WORK/node.out" | head -n1)
    [[ -n "$BASE" ]] && break
    sleep 0.1
done
[[ -n "$BASE" ]] || die "idmint did not start: $(cat "$WORK/node.err")"
URL="$BASE/v1/ids/bench?count=$IDS_PER_REQUEST"
curl -fsS "$URL" >/dev/null || die "first request failed: $(curl -sS "$URL")"
metric() { # NAME LABEL...: the sample's value in $WORK/m.txt
    local name=$1; shift
    awk -v name="$name" -v want="$*" '
        BEGIN { n = split(want, w, " ") }
        $0 !~ /^#/ {
            split($1, parts, "{"); if (parts[1] != name) next
            ok = 1; for (i = 1; i <= n; i++) if (index($1, w[i]) == 0) ok = 0
            if (ok) { print $2 + 0; found = 1; exit }
        }
        END { if (!found) print 0 }' "$WORK/m.txt"
}
scrape() {
    curl -fsS "$BASE/metrics" >"$WORK/m.txt"
    echo "$(metric idmint_ids_served_total 'namespace="bench"') \
$(metric idmint_refills_total 'namespace="bench"' 'outcome="ok"') \
$(metric idmint_refills_total 'namespace="bench"' 'outcome="error"')"
}
echo "   wrk -t$THREADS -c$CONNS ${WARMUP}s warm-up, then ${WINDOW}s measured: GET $URL"
wrk -t"$THREADS" -c"$CONNS" -d"${WARMUP}s" "$URL" >/dev/null
read -r s0 ok0 er0 <<<"$(scrape)"
wrk -t"$THREADS" -c"$CONNS" -d"${WINDOW}s" "$URL" | grep -E 'Requests/sec|Non-2xx|Socket errors' | sed 's/^/   /'
read -r s1 ok1 er1 <<<"$(scrape)"
curl -fsS "$BASE/v1/namespaces/bench" >"$WORK/ns.json"
IDS=$(awk -v a="$s0" -v b="$s1" 'BEGIN{printf "%.0f", b-a}')
REFILLS=$(awk -v a="$ok0" -v b="$ok1" -v c="$er0" -v d="$er1" 'BEGIN{printf "%.0f", (b-a)+(d-c)}')
ERRORS=$(awk -v c="$er0" -v d="$er1" 'BEGIN{printf "%.0f", d-c}')
RATIO=$(awk -v i="$IDS" -v r="$REFILLS" 'BEGIN{ if (r>0) printf "%.0f", i/r; else print "inf (no refill in the window)" }')
echo "   window: $IDS ids served, $REFILLS refills ($ERRORS errors): $RATIO ids per authority round trip"
echo "   namespace: $(tr -d '\n' <"$WORK/ns.json" | head -c 400)"
