#!/usr/bin/env bash
# Tier latency benchmark (issue 11): a regional node's single-id p99 when its global tier is
# 100 ms away, side by side with the same regional node whose global tier is local.
#
#   global    idmint serve --grpc (file authority)
#   proxy     bench/load/client's slow-proxy in front of the global's gRPC port, adding
#             LATENCY_MS each way (50: every Block round trip costs 100 ms more)
#   regional  two idmint nodes, [authority] kind = "upstream": "near" leases from the global
#             directly, "far" through the proxy; each serves HTTP
# wrk drives GET /v1/ids/bench on each regional node in turn with the same settings; the
# summary gives both p99s and their ratio (the target: far within 1.2x of near). The regional
# buffers refill in the background (adaptive blocks, low-water refill), so a slow tier above
# should cost a request nothing; the ratio shows whether it does.
#
# Usage:  bash bench/tiers/run.sh
# Knobs (environment): CONNS=50 THREADS=2 DURATION=20 WARMUP=5 LATENCY_MS=50 QUIET_WAIT=30
set -euo pipefail
QUIET_SAMPLE=1
# shellcheck source=bench/load/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../load/lib.sh"

CONNS=${CONNS:-50}
THREADS=${THREADS:-2}
DURATION=${DURATION:-20}
WARMUP=${WARMUP:-5}
LATENCY_MS=${LATENCY_MS:-50}
QUIET_WAIT=${QUIET_WAIT:-30}
NS=bench

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CLIENT_DIR="$ROOT/bench/load/client"
TICKS=$(getconf CLK_TCK)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/idmint-tiers.XXXXXX")
PIDS=()
cleanup() {
    local rc=$?
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        kill -TERM "${PIDS[i]}" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "${PIDS[i]}" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "${PIDS[i]}" 2>/dev/null || true
    done
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "prerequisites"
command -v wrk >/dev/null || die "wrk is missing (apt-get install -y wrk)"
(cd "$ROOT" && cargo build --release -p idmint-cli 2>&1 | tail -n 1)
IDMINT="$ROOT/target/release/idmint"
CARGO_TARGET_DIR="$CLIENT_DIR/target" cargo build --release --manifest-path "$CLIENT_DIR/Cargo.toml" --bin slow-proxy 2>&1 | tail -n 1
PROXY="$CLIENT_DIR/target/release/slow-proxy"
[[ -x "$IDMINT" && -x "$PROXY" ]] || die "the build did not produce $IDMINT and $PROXY"

# address_of FILE PATTERN: waits for a "PATTERN ADDRESS" line in FILE, prints the address.
address_of() {
    local file=$1 pattern=$2 addr=""
    for _ in $(seq 1 200); do
        addr=$(sed -n "s/^$pattern \\([^ ]*\\).*/\\1/p" "$file" | head -n1)
        [[ -n "$addr" ]] && { echo "$addr"; return; }
        sleep 0.1
    done
    cat "$file" >&2
    die "no '$pattern' line in $file"
}

# start NAME CONFIG ARGS...: an idmint node with its own data dir; sets PID.
start() {
    local name=$1 config=$2
    shift 2
    mkdir -p "$WORK/$name"
    printf '%s\n' "$config" >"$WORK/$name.toml"
    "$IDMINT" serve --config "$WORK/$name.toml" --data-dir "$WORK/$name" "$@" >"$WORK/$name.out" 2>&1 &
    PID=$!
    PIDS+=("$PID")
}

say "global tier (file authority), proxy (+${LATENCY_MS} ms each way), two regional nodes"
start global "" --http 127.0.0.1:0 --grpc 127.0.0.1:0
GLOBAL_GRPC=$(address_of "$WORK/global.out" "idmint gRPC listening on")
"$PROXY" --upstream "$GLOBAL_GRPC" --latency-ms "$LATENCY_MS" >"$WORK/proxy.out" 2>&1 &
PIDS+=($!)
PROXY_ADDR=$(address_of "$WORK/proxy.out" "slow-proxy listening on")
regional() {
    printf '[authority]\nkind = "upstream"\nurls = ["http://%s"]\n' "$1"
}
start near "$(regional "$GLOBAL_GRPC")" --http 127.0.0.1:0
NEAR=$(address_of "$WORK/near.out" "idmint listening on")
start far "$(regional "$PROXY_ADDR")" --http 127.0.0.1:0
FAR=$(address_of "$WORK/far.out" "idmint listening on")
echo "global gRPC $GLOBAL_GRPC; proxy $PROXY_ADDR; near $NEAR; far $FAR"
# A Block through the proxy, timed: the tier above really is LATENCY_MS*2 away.
t0=$(date +%s%N)
curl -fsS "$FAR/v1/ids/$NS" >/dev/null || die "the far regional node does not serve: $(cat "$WORK/far.out")"
echo "first request through the far node (namespace set-up and first block): $(( ($(date +%s%N) - t0) / 1000000 )) ms"
curl -fsS "$NEAR/v1/ids/$NS" >/dev/null || die "the near regional node does not serve"

write_wrk_report
# measure NAME URL -> R_RPS R_P50 R_P99 R_ERR R_WAITS
measure() {
    local name=$1 url=$2
    local waits0; waits0=$(curl -fsS "$url/metrics" | awk '/^idmint_refill_waits_total\{namespace="bench"\}/{print $2}')
    wrk_measure "$name" "$url/v1/ids/$NS"
    local waits1; waits1=$(curl -fsS "$url/metrics" | awk '/^idmint_refill_waits_total\{namespace="bench"\}/{print $2}')
    R_WAITS=$(( ${waits1:-0} - ${waits0:-0} ))
    echo "   => $R_RPS req/s, p50 $R_P50 ms, p99 $R_P99 ms, errors $R_ERR, requests that waited for a block $R_WAITS"
}

say "near: regional node, global tier local"
measure near "$NEAR"
N_RPS=$R_RPS N_P50=$R_P50 N_P99=$R_P99 N_ERR=$R_ERR N_WAITS=$R_WAITS
say "far: regional node, global tier $((LATENCY_MS * 2)) ms away (round trip)"
measure far "$FAR"
F_RPS=$R_RPS F_P50=$R_P50 F_P99=$R_P99 F_ERR=$R_ERR F_WAITS=$R_WAITS

curl -fsS "$FAR/v1/namespaces/$NS" | head -c 400
echo

say "summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores shared, $CONNS connections, ${DURATION}s per run)"
F='%-44s %11s %9s %9s %8s %8s\n'
printf "$F" "regional node" "requests/s" "p50 ms" "p99 ms" "errors" "waited"
printf "$F" "near (global tier local)" "$N_RPS" "$N_P50" "$N_P99" "$N_ERR" "$N_WAITS"
printf "$F" "far (global tier +$((LATENCY_MS * 2)) ms round trip)" "$F_RPS" "$F_P50" "$F_P99" "$F_ERR" "$F_WAITS"
RATIO=$(awk -v a="$F_P99" -v b="$N_P99" 'BEGIN{ if (b>0) printf "%.2f", a/b; else print "inf" }')
VERDICT=$(awk -v r="$RATIO" 'BEGIN{ print (r <= 1.2 ? "MET" : "MISSED") }')
echo
echo "far p99 / near p99 = $RATIO (target <= 1.2): $VERDICT"
