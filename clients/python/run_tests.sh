#!/usr/bin/env bash
# Builds the package (wheel and sdist, `python -m build`), installs the wheel (not editable) and
# pytest into a fresh virtual environment in a temporary directory, and runs the tests against
# the installed package: unit tests and the shared conformance scenarios
# (clients/conformance/) against idmint nodes the tests start.
# Needs: python3 (3.10+) with venv, PyPI reachable (build, hatchling, grpcio-tools, pytest),
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
"$venv/pip" install --quiet "$work"/dist/idmint-*.whl
# The package is typed: its sources pass mypy --strict (settings in pyproject.toml).
(cd "$here" && "$venv/python" -m mypy --cache-dir "$work/mypy-cache")
# From the temporary directory, so `import idmint` can only be the installed wheel.
cd "$work"
IDMINT_TEST_INSTALLED=1 "$venv/python" -m pytest -p no:cacheprovider -q "$here/tests" "$@"
