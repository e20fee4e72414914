#!/usr/bin/env bash
# The project's test command (the README's second command): formatting, lints, docs, the whole
# test suite against real servers, the benchmark workspaces compiled, and the loom model checks.
# It installs what it needs that is missing and says clearly what it cannot provide.
#
#   bash scripts/test.sh           everything (what CI runs)
#   bash scripts/test.sh --quick   fmt, clippy, docs and the tests that need no server: a fast loop
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
case "${1:-}" in
  --quick) quick=1 ;;
  "") ;;
  *) echo "usage: bash scripts/test.sh [--quick]" >&2; exit 2 ;;
esac

step() { printf '\n==> %s\n' "$*"; }

# Console scripts installed by pip (schemathesis) land in the interpreter's scripts directory,
# or in the user base's bin with --user (or when site-packages is not writable): neither is
# always on PATH (pyenv's shims only know them after a rehash).
if command -v python3 >/dev/null 2>&1; then
  PATH="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$(python3 -m site --user-base)/bin:$PATH"
  export PATH
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo is not installed; install Rust from https://rustup.rs (1.90 or later)" >&2
  exit 1
fi
for component in rustfmt clippy; do
  if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
    if command -v rustup >/dev/null 2>&1; then
      step "installing the $component component"
      rustup component add "$component"
    else
      echo "error: cargo $component is missing and rustup is not available to install it" >&2
      exit 1
    fi
  fi
done

# crates/node/tests/grpc.rs drives the gRPC API with Python's grpcio (a client idmint did not
# write), its stubs generated from proto/ by grpcio-tools: both from PyPI.
ensure_python_grpc() {
  if ! python3 -c 'import grpc, grpc_tools' >/dev/null 2>&1; then
    step "installing grpcio and grpcio-tools (PyPI)"
    python3 -m pip install --quiet grpcio grpcio-tools
  fi
}

# --- Backend servers the tests talk to (real servers, never mocks) -------------------------
# PostgreSQL and MariaDB: started if installed but not running; installed from Debian as root if
# missing. etcd: the tests start private etcd processes, so only the binary is needed; ZooKeeper
# likewise (private standalone servers from the `zookeeper` package's jars). promtool:
# only the binary, no server.
apt_updated=0
apt_install() {
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "error: $1 is missing; install the Debian package(s) '${*:2}' (needs root) and run again" >&2
    exit 1
  fi
  if [ "$apt_updated" -eq 0 ]; then
    step "apt-get update"
    apt-get update -qq
    apt_updated=1
  fi
  step "installing ${*:2}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${@:2}" >/dev/null
}

wait_for() { # description, command...
  local what=$1; shift
  for _ in $(seq 1 60); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  echo "error: $what did not come up within 30 s" >&2
  exit 1
}

# The RESP front-end's tests (crates/node/tests/resp.rs) drive it with real Redis clients:
# redis-cli and redis-py.
ensure_redis_clients() {
  if ! command -v redis-cli >/dev/null 2>&1; then
    apt_install "redis-cli (drives the RESP front-end's tests)" redis-tools
  fi
  if ! python3 -c "import redis" >/dev/null 2>&1; then
    step "installing redis-py (python3 -m pip install redis)"
    python3 -m pip install --quiet redis
  fi
}

if [ "$quick" -eq 1 ]; then
  ensure_redis_clients
  step "cargo fmt --check"
  cargo fmt --all -- --check
  step "cargo clippy (warnings denied)"
  cargo clippy --workspace --all-targets --all-features -- -D warnings
  step "cargo doc (warnings denied)"
  RUSTDOCFLAGS="-D warnings" cargo doc --workspace --all-features --no-deps --quiet
  step "tests that need no server"
  # The client's conformance runner starts the idmint binary: build it first.
  cargo build --all-features --bin idmint
  cargo test --all-features -p idmint-core -p idmint-api
  # idmint-client but tests/shard_routing.rs, whose nodes share a PostgreSQL authority.
  cargo test --all-features -p idmint-client --lib --test client --test conformance --test failover
  cargo test --all-features -p idmint-client --doc
  cargo test --all-features -p idmint-store --lib --test authorities
  cargo test --all-features -p idmint-node --lib --test api --test resp
  ensure_python_grpc
  cargo test --all-features -p idmint-node --test grpc
  cargo test --all-features -p idmint-cli --test process
  echo
  echo "quick checks passed (servers, benchmarks and loom not run: bash scripts/test.sh)"
  exit 0
fi

step "backend servers"
if ! command -v pg_ctlcluster >/dev/null 2>&1; then
  apt_install "PostgreSQL" postgresql
fi
if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  echo "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  wait_for "PostgreSQL on 127.0.0.1:5432" pg_isready -h 127.0.0.1 -p 5432 -q
fi
echo "PostgreSQL: ready on 127.0.0.1:5432"

if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then
  apt_install "MariaDB" mariadb-server
fi
if ! mariadb-admin -h 127.0.0.1 -P 3306 -uroot ping >/dev/null 2>&1; then
  echo "starting MariaDB"
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  wait_for "MariaDB on 127.0.0.1:3306" mariadb-admin -h 127.0.0.1 -P 3306 -uroot ping
fi
echo "MariaDB: ready on 127.0.0.1:3306"

if ! command -v etcd >/dev/null 2>&1; then
  apt_install "etcd" etcd-server
fi
echo "etcd: $(etcd --version 2>/dev/null | head -n1) (tests start private instances)"

# Redis: the tests start private redis-server processes (never the one on 6379).
if ! command -v redis-server >/dev/null 2>&1; then
  apt_install "Redis" redis-server
fi
echo "Redis: $(redis-server --version | head -n1) (tests start private instances)"

# ZooKeeper: the tests start private standalone servers from the package's jars (and Java).
if [ ! -f /usr/share/java/zookeeper.jar ] || ! command -v java >/dev/null 2>&1; then
  apt_install "ZooKeeper" zookeeper
fi
echo "ZooKeeper: $(basename "$(readlink -f /usr/share/java/zookeeper.jar)" .jar) (tests start private instances)"

# libfaketime: crates/cli/tests/leases.rs starts a node with its clock 30 s behind.
if ! command -v faketime >/dev/null 2>&1; then
  apt_install "faketime (a node started under a clock stepped back)" faketime
fi
echo "faketime: $(command -v faketime)"

# iproute2's `ip`: crates/cli/tests/partitions.rs puts nodes and servers in network namespaces
# (as root) and cuts their links.
if ! command -v ip >/dev/null 2>&1; then
  apt_install "ip (iproute2: network namespaces for the partition tests)" iproute2
fi
echo "ip: $(ip -V 2>/dev/null)"

# promtool lints /metrics in crates/node/tests/metrics.rs; Debian ships it in `prometheus`.
if ! command -v promtool >/dev/null 2>&1; then
  apt_install "promtool (checks the /metrics exposition)" prometheus
fi
echo "promtool: $(promtool --version 2>/dev/null | head -n1)"

# crates/cli/tests/packaging.rs: the systemd unit through `systemd-analyze verify`, the manual
# pages through `man --warnings` (man-db, with groff).
if ! command -v systemd-analyze >/dev/null 2>&1; then
  apt_install "systemd-analyze (checks deploy/idmint.service)" systemd
fi
if ! command -v man >/dev/null 2>&1 || ! command -v groff >/dev/null 2>&1; then
  apt_install "man and groff (render the generated manual pages)" man-db groff-base
fi

# Schemathesis (PyPI) fuzzes a live node against its GET /openapi.json.
if ! command -v schemathesis >/dev/null 2>&1; then
  step "installing schemathesis (PyPI)"
  python3 -m pip install --quiet 'schemathesis>=4,<5'
fi
echo "schemathesis: $(schemathesis --version 2>/dev/null)"

# The Kubernetes manifests (deploy/kubernetes) are validated against the API schemas (PyPI).
if ! command -v kubernetes-validate >/dev/null 2>&1; then
  step "installing kubernetes-validate (PyPI)"
  python3 -m pip install --quiet 'kubernetes-validate>=1.30'
fi

# The status page is checked in headless Chromium through WebDriver (selenium, PyPI).
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  apt_install "Chromium and its WebDriver (the status page test)" chromium chromium-driver
fi
if ! python3 -c 'import selenium' >/dev/null 2>&1; then
  step "installing selenium (PyPI)"
  python3 -m pip install --quiet 'selenium>=4,<5'
fi

ensure_redis_clients
ensure_python_grpc

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (warnings denied)"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "cargo doc (warnings denied)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --all-features --no-deps --quiet

step "cargo test --workspace"
cargo test --workspace --all-features

# The client packages, built and installed as a user would (a wheel in a fresh virtualenv, an
# npm tarball in a fresh node_modules), each running the shared conformance suite
# (clients/conformance) against nodes it starts with the binary cargo test just built.
step "the Python client: build, install, conformance suite"
IDMINT_BIN="$PWD/target/debug/idmint" bash clients/python/run_tests.sh

step "the TypeScript client: pack, install, conformance suite"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1 \
  || ! node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 18) ? 0 : 1)'; then
  echo "error: the TypeScript client needs Node.js 20.18 or later with npm (https://nodejs.org)" >&2
  exit 1
fi
IDMINT_BIN="$PWD/target/debug/idmint" bash clients/typescript/run_tests.sh

step "schemathesis: every operation of GET /openapi.json against a live node"
bash crates/node/tests/schemathesis/run.sh

step "the status page in headless Chromium"
bash crates/node/tests/status_page/run.sh

# The benchmark workspaces are separate (their own peers and lockfiles); compile every target
# so that an API change cannot silently break them. One shared target dir for both.
step "benchmark workspaces compile"
CARGO_TARGET_DIR=target/benches cargo check --quiet --manifest-path bench/Cargo.toml --all-targets
CARGO_TARGET_DIR=target/benches cargo check --quiet --manifest-path bench/load/client/Cargo.toml --all-targets

# Instructions per request through each door (crates/node/benches/doors under callgrind), held
# to bench/doors/counts.toml: a door more than 5% above its figure fails. Counts, not time, so
# the load of the machine cannot hide or fake a loss.
step "the hot path's instruction counts per door"
bash bench/doors/check.sh

step "loom model checks of the lock-free paths"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p idmint-core --test loom --release

echo
echo "all checks passed"
