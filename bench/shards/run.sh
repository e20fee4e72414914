#!/usr/bin/env bash
# Owned shards benchmark: what `shards = "owned"` costs next to an ordinary snowflake
# namespace, in one run, on the same three nodes of one PostgreSQL authority.
#
#   A  GET /v1/ids/events?count=1               twitter layout, worker leases: each node issues
#                                               its own; one wrk per node, all three at once
#   B  GET /v1/ids/photos?shard=S&count=1       instagram layout, shards = "owned": each node's
#                                               wrk asks for random shards of the ranges that
#                                               node holds (read from the lease rows)
#   C  GET /v1/ids/photos?shard=S&count=1       random shards of all to every node: about 2/3
#                                               are forwarded (one gRPC hop) to the holder
#   B1, C1  B and C again with LAT_CONNS connections per node: latency below saturation
# Every run's wrk request function draws its path in Lua, so the three cost the client alike.
# The summary gives the ratios and the targets: B >= 0.90x A (ids/s of the three nodes), and
# p99(C) - p99(B) at most one local round trip (RTT: the median of B, a direct request's
# latency at the same load; the idle loopback latency of one request is printed beside it),
# at full load (closed-loop wrk: there the latency mostly mirrors the throughput) and below
# saturation (B1, C1).
#
# Usage:  bash bench/shards/run.sh
# Knobs (environment): CONNS=16 (per node) LAT_CONNS=1 THREADS=1 (per node) DURATION=5 WARMUP=2
#   QUIET_WAIT=10 SHARDS=2048 RANGE=64 TTL_MS=60000 FLOOR_AHEAD_MS=30000
#   IDMINT (a release binary; default: built here)
# Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust), wrk, psql, curl, python3.
# Loopback only.
set -euo pipefail
QUIET_SAMPLE=1
# shellcheck source=bench/load/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../load/lib.sh"

CONNS=${CONNS:-16}
LAT_CONNS=${LAT_CONNS:-1}
THREADS=${THREADS:-1}
DURATION=${DURATION:-5}
WARMUP=${WARMUP:-2}
QUIET_WAIT=${QUIET_WAIT:-10}
SHARDS=${SHARDS:-2048}
RANGE=${RANGE:-64}
# Leases renewed every 15 s, with 15 s of headroom: with the default 10 s TTL (renewals every
# 2.5 s, 2.5 s of headroom), PostgreSQL's commits waited over 5 s on WALSync while three nodes
# and three wrk held both cores of this machine, every generator reached its recorded floor,
# and both snowflake namespaces answered 503 authority_unavailable until the renewal landed
# (bench/snowflake_batch.sh measures what renewals cost).
TTL_MS=${TTL_MS:-60000}
FLOOR_AHEAD_MS=${FLOOR_AHEAD_MS:-30000}
DB=idmint_shards_bench
NODES=(a b c)

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TICKS=$(getconf CLK_TCK)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/idmint-shards.XXXXXX")
PIDS=()
cleanup() {
    local rc=$?
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        kill -TERM "${PIDS[i]}" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "${PIDS[i]}" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "${PIDS[i]}" 2>/dev/null || true
    done
    psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1 || true
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "prerequisites"
command -v wrk >/dev/null || die "wrk is missing (apt-get install -y wrk)"
command -v psql >/dev/null || die "psql is missing"
if [[ -z "${IDMINT:-}" ]]; then
    (cd "$ROOT" && cargo build --release -p idmint-cli 2>&1 | tail -n 1)
    IDMINT="${CARGO_TARGET_DIR:-$ROOT/target}/release/idmint"
fi
[[ -x "$IDMINT" ]] || die "no idmint binary at $IDMINT"
psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1
psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE $DB" >/dev/null
pg() { psql -h 127.0.0.1 -U postgres -d "$DB" -tAF' ' -c "$1"; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# node NAME: an idmint node on the shared database; sets HTTP_<NAME> and GRPC_<NAME>.
node() {
    local name=$1 http grpc
    http=$(free_port); grpc=$(free_port)
    mkdir -p "$WORK/$name"
    cat >"$WORK/$name.toml" <<EOF
[server]
http = "127.0.0.1:$http"
grpc = "127.0.0.1:$grpc"

[authority]
kind = "postgres"
url = "postgres://postgres@127.0.0.1:5432/$DB"

[peers]
advertise = "http://127.0.0.1:$grpc"
token = "idmint_bench_peer"

[leases]
ttl_ms = $TTL_MS
floor_ahead_ms = $FLOOR_AHEAD_MS

[namespaces.events]
kind = "snowflake"
layout = "twitter"

[namespaces.photos]
kind = "snowflake"
layout = "instagram"
shards = "owned"
logical_shards = $SHARDS
shard_range = $RANGE
EOF
    "$IDMINT" serve --init --config "$WORK/$name.toml" --data-dir "$WORK/$name" >"$WORK/$name.out" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 1 200); do
        curl -fsS "http://127.0.0.1:$http/readyz" >/dev/null 2>&1 && break
        sleep 0.1
    done
    curl -fsS "http://127.0.0.1:$http/readyz" >/dev/null || { cat "$WORK/$name.out"; die "node $name did not start"; }
    printf -v "HTTP_$name" '%s' "http://127.0.0.1:$http"
    printf -v "GRPC_$name" '%s' "http://127.0.0.1:$grpc"
}

say "three nodes on one PostgreSQL database"
for n in "${NODES[@]}"; do node "$n"; done
url_of() { local v="HTTP_$1"; echo "${!v}"; }

RANGES=$(((SHARDS + RANGE - 1) / RANGE))
say "warm-up: the first request for each of the $RANGES ranges, round robin over the nodes, takes it there"
for ((r = 0; r < RANGES; r++)); do
    n=${NODES[r % 3]}
    curl -fsS "$(url_of "$n")/v1/ids/photos?shard=$((r * RANGE))" >/dev/null || die "range $r: no ids from node $n"
done
# Who holds each range: the lease rows of group photos:shards (worker = range index), whose
# holder names the url the holder advertised ("host pid N at URL lease X").
pg "SELECT worker, holder FROM idmint_namespaces_leases WHERE grp = 'photos:shards' AND expires_at > now() ORDER BY worker" >"$WORK/leases.txt"
HELD=$(wc -l <"$WORK/leases.txt")
((HELD == RANGES)) || { cat "$WORK/leases.txt"; die "$HELD of $RANGES ranges held after the warm-up"; }
for n in "${NODES[@]}"; do
    g="GRPC_$n"
    # The shards of the ranges node n holds, as a Lua list.
    awk -v url="${!g}" -v per="$RANGE" -v total="$SHARDS" '
        { for (i = 2; i <= NF; i++) if ($i == url) { for (s = $1 * per; s < ($1 + 1) * per && s < total; s++) printf "%d,", s } }
    ' "$WORK/leases.txt" >"$WORK/held-$n.lua"
    count=$(tr ',' '\n' <"$WORK/held-$n.lua" | grep -c . || true)
    ((count > 0)) || die "node $n holds no range: $(cat "$WORK/leases.txt")"
    echo "node $n ($(url_of "$n")) holds $((count / RANGE)) ranges ($count shards)"
done

write_wrk_report
# script NAME LUA_PICK: a wrk script of report.lua and a request function whose path is the
# Lua expression LUA_PICK (threads seeded apart).
script() {
    cat "$WORK/report.lua" - >"$WORK/$1.lua" <<EOF
local n = 0
setup = function(thread) n = n + 1; thread:set("seed", n) end
init = function(args) math.randomseed(os.time() * 1000 + (seed or 0)) end
$2
request = function() return wrk.format("GET", pick()) end
EOF
}
for n in "${NODES[@]}"; do
    script "a-$n" 'pick = function() return "/v1/ids/events" end'
    script "b-$n" "local held = {$(cat "$WORK/held-$n.lua")}
pick = function() return \"/v1/ids/photos?shard=\" .. held[math.random(#held)] end"
    script "c-$n" "pick = function() return \"/v1/ids/photos?shard=\" .. math.random(0, $((SHARDS - 1))) end"
done

# measure RUN [CONNS]: one wrk per node at once (run RUN's script on each), warm-up first;
# sets R_RPS (the three nodes' requests/s), R_P50 and R_P99 (ms, the worst node's) and R_ERR.
measure() {
    local run=$1 conns=${2:-$CONNS} n pids=()
    echo "-- $run: warm-up ${WARMUP}s, then wrk -t$THREADS -c$conns -d${DURATION}s on each node at once"
    for n in "${NODES[@]}"; do
        wrk -t"$THREADS" -c"$conns" -d"${WARMUP}s" -s "$WORK/$run-$n.lua" "$(url_of "$n")" >/dev/null &
        pids+=($!)
    done
    wait "${pids[@]}"
    pids=()
    wait_quiet "$run"
    for n in "${NODES[@]}"; do
        wrk -t"$THREADS" -c"$conns" -d"${DURATION}s" -s "$WORK/$run-$n.lua" "$(url_of "$n")" >"$WORK/$run-$n.wrk" &
        pids+=($!)
    done
    wait "${pids[@]}"
    R_RPS=0 R_P50=0 R_P99=0 R_ERR=0
    for n in "${NODES[@]}"; do
        local line rps p50 p99
        line=" $(grep '^WRK ' "$WORK/$run-$n.wrk")"
        rps=$(awk -v r="$(echo "$line" | kv requests)" -v d="$(echo "$line" | kv duration_us)" 'BEGIN{printf "%.0f", r/(d/1e6)}')
        p50=$(awk -v p="$(echo "$line" | kv p50_us)" 'BEGIN{printf "%.3f", p/1000}')
        p99=$(awk -v p="$(echo "$line" | kv p99_us)" 'BEGIN{printf "%.3f", p/1000}')
        echo "   node $n: $rps req/s, p50 $p50 ms, p99 $p99 ms, errors $(echo "$line" | kv errors)"
        R_RPS=$((R_RPS + rps))
        R_P50=$(awk -v a="$R_P50" -v b="$p50" 'BEGIN{print (b > a ? b : a)}')
        R_P99=$(awk -v a="$R_P99" -v b="$p99" 'BEGIN{print (b > a ? b : a)}')
        R_ERR=$((R_ERR + $(echo "$line" | kv errors)))
    done
    echo "   => $R_RPS req/s in all, worst node's p50 $R_P50 ms and p99 $R_P99 ms, errors $R_ERR"
}

measure a; A_RPS=$R_RPS A_P50=$R_P50 A_P99=$R_P99 A_ERR=$R_ERR
measure b; B_RPS=$R_RPS B_P50=$R_P50 B_P99=$R_P99 B_ERR=$R_ERR
measure c; C_RPS=$R_RPS C_P50=$R_P50 C_P99=$R_P99 C_ERR=$R_ERR
measure b "$LAT_CONNS"; B1_RPS=$R_RPS B1_P50=$R_P50 B1_P99=$R_P99 B1_ERR=$R_ERR
measure c "$LAT_CONNS"; C1_RPS=$R_RPS C1_P50=$R_P50 C1_P99=$R_P99 C1_ERR=$R_ERR

# The idle loopback latency of one direct request (median of 200, one connection each).
for ((i = 0; i < 200; i++)); do
    curl -fsS -o /dev/null -w '%{time_total}\n' "$(url_of a)/v1/ids/photos?shard=$(head -c 5 "$WORK/held-a.lua" | cut -d, -f1)"
done | sort -n | awk '{ v[NR] = $1 } END { printf "%.3f\n", v[int(NR / 2)] * 1000 }' >"$WORK/idle.txt"
IDLE=$(cat "$WORK/idle.txt")

say "summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores shared by three nodes, PostgreSQL and three wrk; $CONNS connections and $THREADS thread(s) per node, ${DURATION}s per run; $SHARDS shards in $RANGES ranges)"
F='%-62s %12s %9s %9s %7s\n'
printf "$F" "run (three nodes at once)" "requests/s" "p50 ms" "p99 ms" "errors"
printf "$F" "A  twitter layout, worker leases" "$A_RPS" "$A_P50" "$A_P99" "$A_ERR"
printf "$F" "B  owned shards, each node asked for shards it holds" "$B_RPS" "$B_P50" "$B_P99" "$B_ERR"
printf "$F" "C  owned shards, random shards to any node (2/3 forwarded)" "$C_RPS" "$C_P50" "$C_P99" "$C_ERR"
printf "$F" "B1 as B, $LAT_CONNS connection(s) per node" "$B1_RPS" "$B1_P50" "$B1_P99" "$B1_ERR"
printf "$F" "C1 as C, $LAT_CONNS connection(s) per node" "$C1_RPS" "$C1_P50" "$C1_P99" "$C1_ERR"
echo "(p50, p99: the worst of the three nodes' wrk)"
echo
verdict() { awk -v v="$1" -v t="$2" 'BEGIN{ print (v >= t ? "MET" : "MISSED") }'; }
r() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b>0) printf "%.2f", a/b; else print "inf" }'; }
echo "B / A (ids/s of the three nodes) = $(r "$B_RPS" "$A_RPS")x (target >= 0.90): $(verdict "$(r "$B_RPS" "$A_RPS")" 0.90)"
echo "C / B                            = $(r "$C_RPS" "$B_RPS")x"
# hop P99C P99B RTT NAME: the p99 difference against one round trip.
hop() {
    local d
    d=$(awk -v c="$1" -v b="$2" 'BEGIN{ printf "%.3f", c - b }')
    echo "$4: p99 difference $d ms; one round trip = $3 ms (the direct run's p50; idle: $IDLE ms):" \
        "$(awk -v d="$d" -v t="$3" 'BEGIN{ print (d <= t ? "MET" : "MISSED") }') (target: at most one round trip)"
}
hop "$C_P99" "$B_P99" "$B_P50" "p99(C) - p99(B)  "
hop "$C1_P99" "$B1_P99" "$B1_P50" "p99(C1) - p99(B1)"
errors=$((A_ERR + B_ERR + C_ERR + B1_ERR + C1_ERR))
if ((errors > 0)); then
    for n in "${NODES[@]}"; do
        echo "node $n's warnings:"; grep -E ' (WARN|ERROR) ' "$WORK/$n.out" | tail -n 5 || true
    done
    die "$errors requests failed (wrk counts any non-2xx answer)"
fi
