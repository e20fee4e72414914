#!/usr/bin/env bash
# Strict order benchmark: what `order = "strict"` costs next to an ordinary namespace, in one
# run, on the same two nodes of one PostgreSQL authority.
#
#   A   GET /v1/ids/plain?count=1  on node A (cache "adaptive", order "writer"): the baseline
#   L   GET /v1/ids/chat?count=1   on the leader of "chat" (order "strict")
#   F   GET /v1/ids/chat?count=1   on the follower (every request forwarded, batched, to L)
#   L100, F100  the same with count=100 (ids per second)
# wrk drives each with the same settings. The summary gives the ratios and the targets:
# F >= 0.3x A, L >= 0.8x A, p99(F) <= 3x p99(L), and strict ids/s with count=100 >= 1,000,000
# (50x TiDB's documented 20,000 per second for AUTO_ID_CACHE=1).
#
# Usage:  bash bench/strict/run.sh
# Knobs (environment): CONNS=50 THREADS=2 DURATION=15 WARMUP=3 QUIET_WAIT=30
# Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust) and wrk. Loopback only.
set -euo pipefail
QUIET_SAMPLE=1
# shellcheck source=bench/load/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../load/lib.sh"

CONNS=${CONNS:-50}
THREADS=${THREADS:-2}
DURATION=${DURATION:-15}
WARMUP=${WARMUP:-3}
QUIET_WAIT=${QUIET_WAIT:-30}
DB=idmint_strict_bench

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TICKS=$(getconf CLK_TCK)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/idmint-strict.XXXXXX")
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
(cd "$ROOT" && cargo build --release -p idmint-cli 2>&1 | tail -n 1)
IDMINT="$ROOT/target/release/idmint"
[[ -x "$IDMINT" ]] || die "the build did not produce $IDMINT"
psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1
psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE $DB" >/dev/null

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# node NAME: an idmint node on the shared database; sets HTTP_<NAME>.
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

[namespaces.chat]
kind = "sequence"
order = "strict"

[namespaces.plain]
kind = "sequence"
EOF
    "$IDMINT" serve --init --config "$WORK/$name.toml" --data-dir "$WORK/$name" >"$WORK/$name.out" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 1 200); do
        curl -fsS "http://127.0.0.1:$http/readyz" >/dev/null 2>&1 && break
        sleep 0.1
    done
    curl -fsS "http://127.0.0.1:$http/readyz" >/dev/null || { cat "$WORK/$name.out"; die "node $name did not start"; }
    printf -v "HTTP_$name" '%s' "http://127.0.0.1:$http"
}

say "two nodes on one PostgreSQL database"
node a
node b
role() { curl -fsS "$1/v1/namespaces/chat" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"]["leader"]["role"])'; }
for _ in $(seq 1 100); do
    ra=$(role "$HTTP_a"); rb=$(role "$HTTP_b")
    [[ "$ra$rb" == "leaderfollower" || "$ra$rb" == "followerleader" ]] && break
    sleep 0.1
done
if [[ "$ra" == leader ]]; then LEADER=$HTTP_a FOLLOWER=$HTTP_b; else LEADER=$HTTP_b FOLLOWER=$HTTP_a; fi
echo "leader $LEADER, follower $FOLLOWER"

write_wrk_report
# measure NAME URL -> R_RPS R_P50 R_P99 R_ERR
measure() {
    wrk_measure "$1" "$2"
    echo "   => $R_RPS req/s, p50 $R_P50 ms, p99 $R_P99 ms, errors $R_ERR"
}

measure plain "$LEADER/v1/ids/plain";            A_RPS=$R_RPS A_P99=$R_P99 A_ERR=$R_ERR
measure leader "$LEADER/v1/ids/chat";            L_RPS=$R_RPS L_P99=$R_P99 L_ERR=$R_ERR
measure follower "$FOLLOWER/v1/ids/chat";        F_RPS=$R_RPS F_P99=$R_P99 F_ERR=$R_ERR
measure leader100 "$LEADER/v1/ids/chat?count=100";     L100=$R_RPS L100_ERR=$R_ERR
measure follower100 "$FOLLOWER/v1/ids/chat?count=100"; F100=$R_RPS F100_ERR=$R_ERR

say "summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores shared by both nodes, PostgreSQL and wrk; $CONNS connections, ${DURATION}s per run)"
F='%-46s %12s %9s %7s\n'
printf "$F" "run" "requests/s" "p99 ms" "errors"
printf "$F" "A  plain namespace (adaptive), count=1" "$A_RPS" "$A_P99" "$A_ERR"
printf "$F" "L  strict, on the leader, count=1" "$L_RPS" "$L_P99" "$L_ERR"
printf "$F" "F  strict, on the follower, count=1" "$F_RPS" "$F_P99" "$F_ERR"
printf "$F" "L  strict, on the leader, count=100" "$L100" "" "$L100_ERR"
printf "$F" "F  strict, on the follower, count=100" "$F100" "" "$F100_ERR"
echo
verdict() { awk -v v="$1" -v t="$2" 'BEGIN{ print (v >= t ? "MET" : "MISSED") }'; }
r() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b>0) printf "%.2f", a/b; else print "inf" }'; }
echo "follower / plain      = $(r "$F_RPS" "$A_RPS")x (target >= 0.3): $(verdict "$(r "$F_RPS" "$A_RPS")" 0.3)"
echo "leader / plain        = $(r "$L_RPS" "$A_RPS")x (target >= 0.8): $(verdict "$(r "$L_RPS" "$A_RPS")" 0.8)"
P=$(r "$F_P99" "$L_P99")
echo "p99 follower / leader = ${P}x (target <= 3): $(awk -v p="$P" 'BEGIN{ print (p <= 3 ? "MET" : "MISSED") }')"
IDS_L=$((L100 * 100)) IDS_F=$((F100 * 100))
echo "strict ids/s, count=100: leader $IDS_L, follower $IDS_F (target >= 1,000,000 = 50x TiDB's 20,000): $(verdict "$IDS_F" 1000000) on the follower, $(verdict "$IDS_L" 1000000) on the leader"
