#!/usr/bin/env bash
# The status page in a real browser: starts `idmint serve` (debug build) with idmint.toml beside
# this script, asks for some ids (25 of photos; a block of 10 of tickets_odd, as a lower tier
# would; a steady trickle of legacy_users until its exhaustion is projected), then check.py
# loads GET / in headless Chromium through WebDriver and checks what it shows; then a node with
# [auth] (idmint-auth.toml), where check_login.py signs in through the form as a person would.
#
#   bash crates/node/tests/status_page/run.sh [--screenshot PATH]
#
# With --screenshot it first drives SCREENSHOT_MINUTES (default 5) of load, so the picture's
# sparklines have whole minutes; check.py then also checks them.
#
# Needs Debian's `chromium` and `chromium-driver` and PyPI's `selenium`; scripts/test.sh
# installs them. Honours CARGO_TARGET_DIR.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
screenshot=()
if [ "${1:-}" = "--screenshot" ]; then screenshot=(--screenshot "$(realpath -m "$2")"); fi

source "$here/../support/live_node.sh"
start_node "$here/idmint.toml"

get() { # URL: the body (fails on an error status)
  python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' "$1"
}
get "$base/v1/ids/photos?count=25" >/dev/null
for ns in tickets_odd tweets sessions uploads; do get "$base/v1/ids/$ns?count=3" >/dev/null; done
# A block, as a lower tier asks for one: the page lists it under the nodes below.
python3 -c 'import sys, urllib.request; urllib.request.urlopen(urllib.request.Request(sys.argv[1], method="POST")).read()' \
  "$base/v1/blocks/tickets_odd?count=10"
projected=""
for _ in $(seq 1 60); do
  get "$base/v1/ids/legacy_users?count=5" >/dev/null
  projected="$(get "$base/v1/namespaces/legacy_users" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"]["projected_exhaustion"] or "")')"
  [ -n "$projected" ] && break
  sleep 0.25
done
[ -n "$projected" ] || { echo "error: legacy_users never had a projected exhaustion" >&2; exit 1; }

if [ ${#screenshot[@]} -gt 0 ]; then
  # For the picture only: minutes of a demand that rises and falls on orders, so the sparklines
  # have whole minutes to draw (SCREENSHOT_MINUTES, default 5), and a trickle on legacy_users,
  # whose red needs a current demand. Pacing, not ordering: nothing waits on it.
  python3 - "$base" "${SCREENSHOT_MINUTES:-5}" <<'PY'
import math, sys, time, urllib.request
base, minutes = sys.argv[1], float(sys.argv[2])
start = time.monotonic()
end, i = start + minutes * 60, 0
while time.monotonic() < end:
    phase = (time.monotonic() - start) / (end - start)
    count = int(10 + 190 * math.sin(math.pi * phase) ** 2)
    urllib.request.urlopen(f"{base}/v1/ids/orders?count={count}").read()
    if i % 20 == 0:
        urllib.request.urlopen(f"{base}/v1/ids/legacy_users?count=2").read()
    i += 1
    time.sleep(0.25)
PY
fi
python3 "$here/check.py" "$base" "${screenshot[@]}"
check_node

# The same page behind [auth]: a browser signs in with a token (check_login.py).
stop_node_only
start_node "$here/idmint-auth.toml" auth-data
python3 "$here/check_login.py" "$base" idmint_status_page_reader
check_node
