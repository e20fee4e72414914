#!/usr/bin/env bash
# Runs idmint-core's generator benchmarks with one command: the criterion benches (reports in
# target/criterion), then the summary runner (median of 5 timed runs per figure, ratios
# idmint/peer, targets), which prints markdown and writes target/summary.md.
# Usage: bench/run.sh [scenario...]   e.g. bench/run.sh a_twitter d_   (default: all)
# A scenario is a_twitter, b_wide, c_buffer, d_uuid7 or d_ulid (a prefix is enough for the
# summary; criterion takes the same words as a filter).
set -euo pipefail
cd "$(dirname "$0")"
echo "== rustc: $(rustc --version); cores: $(nproc); cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "== load average: $(cut -d' ' -f1-3 /proc/loadavg) (other processes on the 2 cores skew the figures)"
cargo build --release --benches --bin summary
filter="${*:-}"
echo "== criterion (cargo bench --bench generators)"
if [ -n "$filter" ]; then
  for f in "$@"; do cargo bench --bench generators -- "$f"; done
else
  cargo bench --bench generators
fi
echo "== summary (cargo run --release --bin summary)"
cargo run --release --bin summary -- "$@"
