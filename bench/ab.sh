#!/usr/bin/env bash
# Before/after comparison of idmint-core's generators: builds the summary runner from a base git
# revision (its own bench code and idmint-core, exported with `git archive`) and from the working
# tree, then runs the two binaries in turns, ROUNDS times each, on the same scenarios. Each run
# has its own peers (ferroid, ...), so each run's ratios are side by side in one process; the
# table printed at the end gives, per row, the median of the runs' medians and their range.
# Usage: bench/ab.sh BASE_REV [scenario...]   e.g. bench/ab.sh main a_twitter b_wide d_
# Env: ROUNDS (default 3), BENCH_RUNS (timed runs per figure inside each run, default 5; the base
# binary may ignore it), CARGO_TARGET_DIR (default bench/target), JOBS (cargo -j, default 1).
set -euo pipefail
base_rev=${1:?usage: bench/ab.sh BASE_REV [scenario...]}
shift
cd "$(dirname "$0")"
bench_dir=$(pwd)
repo=$(git rev-parse --show-toplevel)
target=${CARGO_TARGET_DIR:-$bench_dir/target}
export CARGO_TARGET_DIR=$target
jobs=${JOBS:-1}
rounds=${ROUNDS:-3}
out=$target/ab
mkdir -p "$out"
tree=$target/ab-base-tree
rm -rf "$tree" && mkdir -p "$tree"
git -C "$repo" archive "$base_rev" | tar -x -C "$tree"
cp "$bench_dir/Cargo.lock" "$tree/bench/Cargo.lock"
echo "== building the base ($base_rev = $(git -C "$repo" rev-parse --short "$base_rev"))"
(cd "$tree/bench" && cargo build --release -j "$jobs" --bin summary)
cp "$target/release/summary" "$out/summary-base"
echo "== building the working tree ($(git -C "$repo" rev-parse --short HEAD)$(git -C "$repo" diff --quiet || echo ' + changes'))"
cargo build --release -j "$jobs" --bin summary
cp "$target/release/summary" "$out/summary-head"
echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq 1 "$rounds"); do
  for which in base head; do
    echo "== round $i: $which"
    "$out/summary-$which" "$@" 2>/dev/null > "$out/$which-$i.md"
  done
done
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" "$rounds" <<'EOF'
import re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def rate(s):
    v, unit = s.split()
    return float(v) * {"G/s": 1e9, "M/s": 1e6, "k/s": 1e3}[unit]
rows = {}  # (which, scenario, contender) -> [[1t rates], [2t rates]]
ratios = {}  # (which, scenario, contender) -> [[1t], [2t]]
for which in ("base", "head"):
    for i in range(1, rounds + 1):
        scenario = None
        for line in open(f"{out}/{which}-{i}.md"):
            if line.startswith("### "):
                scenario = line[4:].strip()
            if not line.startswith("| ") or scenario is None or "contender" in line:
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 6 or "/s" not in cells[2]:
                continue
            key = (which, scenario, cells[0])
            r = rows.setdefault(key, [[], []])
            q = ratios.setdefault(key, [[], []])
            for t, (ci, ri) in enumerate(((2, 3), (4, 5))):
                r[t].append(rate(re.match(r"[\d.]+ [GMk]/s", cells[ci]).group(0)))
                try:
                    q[t].append(float(cells[ri]))
                except ValueError:
                    pass
def fmt(v):
    return f"{v/1e9:.2f} G/s" if v >= 1e9 else f"{v/1e6:.2f} M/s"
print("\n| build | scenario | contender | 1 thread: median of runs (range) | ratio idmint/peer | 2 threads | ratio idmint/peer |")
print("|---|---|---|---:|---:|---:|---:|")
for (which, scenario, name), r in rows.items():
    cells = []
    for t in (0, 1):
        v = r[t]
        cells.append(f"{fmt(statistics.median(v))} ({fmt(min(v))}-{fmt(max(v))})")
        q = ratios[(which, scenario, name)][t]
        cells.append(f"{statistics.median(q):.2f} ({min(q):.2f}-{max(q):.2f})" if q else "-")
    print(f"| {which} | {scenario.split(',')[0]} | {name} | " + " | ".join(cells) + " |")
EOF
