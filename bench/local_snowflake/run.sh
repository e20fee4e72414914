#!/usr/bin/env bash
# Local snowflake ids per second on one thread, in each language beside the best-known local
# snowflake library of its registry, in one run against one node: Rust (ferroid), Python
# (snowflake-id), Node.js (@sapphire/snowflake, nodejs-snowflake). Prints markdown tables.
#
# Needs the idmint binary ($IDMINT_BIN, else target/debug/idmint), cargo, python3 with venv,
# node and npm, and the registries (crates.io, PyPI, npm) for the peers. ROUNDS (default 5).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin=${IDMINT_BIN:-$repo/target/debug/idmint}
rounds=${ROUNDS:-5}
[[ -x $bin ]] || { echo "run.sh: the idmint binary $bin is missing (cargo build --bin idmint, or set IDMINT_BIN)" >&2; exit 1; }
work=$(mktemp -d)
node_pid=
cleanup() { [[ -n $node_pid ]] && kill "$node_pid" 2>/dev/null && wait "$node_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
http=$(port); grpc=$(port)
mkdir "$work/data"
sed -e "s|{{HTTP}}|$http|" -e "s|{{GRPC}}|$grpc|" -e "s|{{DATA_DIR}}|$work/data|" \
  "$here/node.toml.in" > "$work/node.toml"
RUST_LOG=warn "$bin" serve --config "$work/node.toml" --init > "$work/node.out" 2>&1 &
node_pid=$!
for _ in $(seq 100); do grep -q 'idmint listening on' "$work/node.out" && break; sleep 0.1; done
grep -q 'idmint listening on' "$work/node.out" || { cat "$work/node.out" >&2; exit 1; }
url="http://127.0.0.1:$grpc"

# Build everything first, so no build runs beside a measurement.
(cd "$repo/bench" && cargo build --release --quiet --bin local_snowflake)
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet build snowflake-id
"$work/venv/bin/python" -m build --wheel --outdir "$work/dist" "$repo/clients/python" > /dev/null
"$work/venv/bin/pip" install --quiet "$work"/dist/idmint-*.whl
(cd "$repo/clients/typescript" && npm ci --no-audit --no-fund --loglevel=error && npm pack --silent --pack-destination "$work" > /dev/null)
mkdir "$work/js"
(cd "$work/js" && printf '{"name":"bench","private":true,"type":"module"}\n' > package.json &&
  npm install --no-audit --no-fund --loglevel=error "$work"/idmint-client-*.tgz @sapphire/snowflake nodejs-snowflake > /dev/null)
cp "$repo/clients/typescript/bench_local_snowflake.mjs" "$work/js/"

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$repo/bench/target/release/local_snowflake" "$url" "$rounds"
echo
"$work/venv/bin/python" "$repo/clients/python/bench_local_snowflake.py" "$url" "$rounds"
echo
(cd "$work/js" && node bench_local_snowflake.mjs "$url" "$rounds")
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
