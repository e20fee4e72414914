#!/usr/bin/env bash
# Rounds of bench/load/run.sh (ROUNDS of them), each a fresh node and a fresh Redis INCR run
# beside it, and the builds of BUILDS in turns within each round: per figure, the median over
# rounds and its range (min-max), and each round's ratio to Redis INCR of the same round.
#
#   ROUNDS=5 bash bench/load/run.sh                               this tree's release build
#   ROUNDS=4 BUILDS="old=/tmp/idmint-old new=target/release/idmint" bash bench/load/run.sh
#
# Other knobs pass through to run.sh (DURATION, WARMUP, CONNS, THREADS, EXTRA, MARIADB, ...).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ROUNDS=${ROUNDS:-5}
if [[ -z "${BUILDS:-}" ]]; then
    (cd "$ROOT" && cargo build --release -p idmint-cli 2>&1 | tail -n 2)
    BUILDS="tree=$ROOT/target/release/idmint"
fi
OUT=$(mktemp -d "${TMPDIR:-/tmp}/idmint-rounds.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
for round in $(seq 1 "$ROUNDS"); do
    for build in $BUILDS; do
        label=${build%%=*} bin=${build#*=}
        echo "== round $round/$ROUNDS: $label ($bin)"
        ROUNDS=1 IDMINT="$bin" bash "$HERE/run.sh" >"$OUT/$label.$round.log" 2>&1 \
            || { tail -n 30 "$OUT/$label.$round.log"; echo "round $round of $label failed" >&2; exit 1; }
        grep '^ROUND ' "$OUT/$label.$round.log" | sed "s/^ROUND /ROUND build=$label round=$round /" | tee -a "$OUT/rounds.txt"
    done
done
python3 - "$OUT/rounds.txt" <<'PY'
import statistics, sys
rows = []
for line in open(sys.argv[1]):
    kv = dict(p.split("=", 1) for p in line.split()[1:])
    rows.append(kv)
figures = [
    ("HTTP count=1 req/s", "http1_rps", True),
    ("HTTP count=100 ids/s", "http100_ids", False),
    ("RESP INCR req/s", "resp_rps", True),
    ("gRPC Next req/s (h2load)", "grpc_h2load_rps", True),
    ("gRPC Next req/s (tonic client)", "grpc_load_rps", True),
    ("gRPC NextStream ids/s", "stream_ids", False),
    ("Redis INCR req/s", "redis_rps", False),
    ("HTTP count=1 p99 ms", "http1_p99", False),
    ("RESP INCR p99 ms", "resp_p99", False),
    ("Redis INCR p99 ms", "redis_p99", False),
]
def num(v):
    try:
        return float(v)
    except ValueError:
        return None
builds = list(dict.fromkeys(r["build"] for r in rows))
print(f"\n{len(rows) // len(builds)} rounds per build; median (min-max); 'x Redis' is the median of each round's ratio to the Redis INCR run of the same round")
print(f"{'figure':<34}" + "".join(f"{b:>40}" for b in builds))
for name, key, ratio in figures:
    cells = []
    for b in builds:
        vals = [num(r[key]) for r in rows if r["build"] == b and num(r.get(key, "")) is not None]
        if not vals:
            cells.append("-")
            continue
        med = statistics.median(vals)
        fmt = (lambda v: f"{v:,.3f}") if med < 100 else (lambda v: f"{v:,.0f}")
        cell = f"{fmt(med)} ({fmt(min(vals))}-{fmt(max(vals))})"
        if ratio:
            rs = [num(r[key]) / num(r["redis_rps"]) for r in rows if r["build"] == b and num(r["redis_rps"])]
            cell += f" {statistics.median(rs):.2f}x"
        cells.append(cell)
    print(f"{name:<34}" + "".join(f"{c:>40}" for c in cells))
if len(builds) > 1:
    base = builds[0]
    for b in builds[1:]:
        print(f"\n{b} against {base}, median of per-round ratios (range):")
        for name, key, _ in figures[:6]:
            rs = []
            for rnd in sorted({r["round"] for r in rows}):
                a = [num(r[key]) for r in rows if r["build"] == base and r["round"] == rnd]
                c = [num(r[key]) for r in rows if r["build"] == b and r["round"] == rnd]
                if a and c and a[0]:
                    rs.append(c[0] / a[0])
            if rs:
                print(f"  {name:<34} {statistics.median(rs):.2f}x ({min(rs):.2f}-{max(rs):.2f})")
PY
