#!/usr/bin/env bash
# Builds the package (wheel and sdist, `python -m build`), installs the wheel (not editable) and
# pytest into a fresh virtual environment in a temporary directory, and runs the tests against
# the installed package: unit tests and the shared conformance scenarios
# (clients/conformance/) against idmint nodes the tests start.
# The wheel goes in with its `prometheus` extra (tests/test_typed.py scrapes `idmint.metrics`), and
# examples/typed_ids.py (the typed handles) and the README's quick start must pass `mypy --strict` against it.
# Needs: python3 (3.10+) with venv, PyPI reachable (build, hatchling, grpcio-tools, pytest,
# mypy, prometheus_client),
# openssl, and the idmint binary ($IDMINT_BIN, else <repo>/target/debug/idmint).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
export IDMINT_BIN=${IDMINT_BIN:-$repo/target/debug/idmint}
if [[ ! -x $IDMINT_BIN ]]; then
  echo "run_tests.sh: the idmint binary is missing: $IDMINT_BIN (cargo build --bin idmint, or set IDMINT_BIN)" >&2
  exit 1
fi
command -v openssl >/dev/null || { echo "run_tests.sh: openssl is missing (TLS scenarios)" >&2; exit 1; }
python=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m venv "$work/venv"
venv="$work/venv/bin"
"$venv/pip" install --quiet --upgrade pip build pytest mypy
"$venv/python" -m build --outdir "$work/dist" "$here"
wheel=$(echo "$work"/dist/idmint-*.whl)
"$venv/pip" install --quiet "$wheel[prometheus]"
# The package is typed: its sources pass mypy --strict (settings in pyproject.toml).
(cd "$here" && "$venv/python" -m mypy --cache-dir "$work/mypy-cache")
# So does code using it as the README shows, against the installed wheel (from $work, so that
# neither src/ nor pyproject.toml's settings are seen): the ids' types follow the handles.
# The README's quick start too (its first python block; `user_id` is its one free name).
{ echo 'user_id = 31341'; awk '/^```python$/ { n++; if (n == 1) { on = 1; next } } /^```$/ { on = 0 } on' "$here/README.md"; } > "$work/readme_quick_start.py"
printf '[mypy]\n' > "$work/mypy.ini"
(cd "$work" && "$venv/python" -m mypy --strict --no-incremental --config-file mypy.ini \
  "$here/examples/typed_ids.py" readme_quick_start.py)
# From the temporary directory, so `import idmint` can only be the installed wheel.
cd "$work"
IDMINT_TEST_INSTALLED=1 "$venv/python" -m pytest -p no:cacheprovider -q "$here/tests" "$@"
# The local snowflake process cases (clients/conformance/local_snowflake.py) with this client's
# worker, and with the Rust and TypeScript clients' workers where they can run here, so one run
# has every language generating on one namespace at once.
workers=(--worker "python=$venv/python $here/examples/local_snowflake_worker.py")
rust_worker=$repo/target/debug/examples/local_snowflake_worker
if [[ -x $rust_worker ]]; then
  workers+=(--worker "rust=$rust_worker")
else
  echo "run_tests.sh: $rust_worker not built: the local snowflake cases run without the Rust worker" >&2
fi
if command -v npm >/dev/null && [[ -d $repo/clients/typescript ]]; then
  (cd "$repo/clients/typescript" && npm ci --no-audit --no-fund --loglevel=error >/dev/null &&
    npm pack --silent --pack-destination "$work" >/dev/null)
  mkdir "$work/js"
  (cd "$work/js" && printf '{"name":"w","private":true,"type":"module"}\n' > package.json &&
    npm install --no-audit --no-fund --prefer-offline --loglevel=error "$work"/idmint-client-*.tgz >/dev/null)
  cp "$repo/clients/typescript/test/local_snowflake_worker.mjs" "$work/js/"
  workers+=(--worker "node=node $work/js/local_snowflake_worker.mjs")
else
  echo "run_tests.sh: npm missing: the local snowflake cases run without the TypeScript worker" >&2
fi
"$venv/python" "$repo/clients/conformance/local_snowflake.py" --idmint "$IDMINT_BIN" "${workers[@]}"
