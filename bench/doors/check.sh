#!/usr/bin/env bash
# The hot path's guard: instructions per request through each door of a node (HTTP count=1 and
# count=100, RESP INCR, gRPC Next and NextStream, a strict forward, a shard forward, a refill),
# counted by callgrind on the server thread of crates/doors (bin doors), compared with
# bench/doors/counts.toml. Fails when a door costs more than 5% above its recorded figure.
#
#   bash bench/doors/check.sh                 compare (what CI runs)
#   bash bench/doors/check.sh --record        write the counts of this tree to counts.toml
#   RUNS=3 bash bench/doors/check.sh          each door 3 times: the median and the spread
#   DOORS="http_1 refill" bash bench/doors/check.sh    some doors only (compare)
#   KEEP=DIR bash bench/doors/check.sh        keep callgrind's files in DIR (callgrind_annotate)
#
# Instruction counts do not depend on the machine's load; they do on the compiler and the
# locked dependencies: record with the toolchain CI uses (the output names the rustc).
set -euo pipefail
cd "$(dirname "$0")/../.."

mode=compare
case "${1:-}" in
  --record) mode=record ;;
  "") ;;
  *) echo "usage: bash bench/doors/check.sh [--record]" >&2; exit 2 ;;
esac
RUNS=${RUNS:-1}
DOORS=${DOORS:-"http_1 http_100 resp_incr grpc_next grpc_stream strict_forward shard_forward refill"}
RECORD=bench/doors/counts.toml

if ! command -v valgrind >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing valgrind (Debian)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
  else
    echo "error: valgrind is missing: apt-get install -y valgrind" >&2
    exit 1
  fi
fi

cargo build --quiet --release -p idmint-doors
bin=${CARGO_TARGET_DIR:-target}/release/doors
[ -x "$bin" ] || { echo "error: no $bin after cargo build --release -p idmint-doors" >&2; exit 1; }

work=${KEEP:-$(mktemp -d "${TMPDIR:-/tmp}/idmint-doors.XXXXXX")}
mkdir -p "$work"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT

one() { # door run
  local door=$1 run=$2 out
  out=$(valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*doors_measured_phase' \
    --callgrind-out-file="$work/$door.$run.out" "$bin" "$door" 2>"$work/$door.$run.log") \
    || { echo "error: door $door failed under callgrind:" >&2; tail -n 20 "$work/$door.$run.log" >&2; return 1; }
  sed -n 's/.*requests=\([0-9]*\).*/\1/p' <<<"$out" >"$work/$door.requests"
}
export -f one
export bin work

started=$(date +%s)
jobs=()
for run in $(seq 1 "$RUNS"); do
  for door in $DOORS; do jobs+=("$door $run"); done
done
printf '%s\n' "${jobs[@]}" | xargs -P "$(nproc)" -L 1 bash -c 'one $0 $1'
echo "counted ${#jobs[@]} runs in $(( $(date +%s) - started )) s ($(nproc) at a time; $(rustc --version))"

python3 bench/doors/counts.py "$mode" "$work" "$RECORD"
