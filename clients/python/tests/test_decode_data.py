"""decode.json is what the idmint binary under test prints: regenerated and compared, so the
clients' offline decoders are checked against the CLI as it is now."""

from __future__ import annotations

import json
import subprocess
import sys

from topology import CONFORMANCE, idmint_bin


def test_decode_json_matches_the_binary() -> None:
    done = subprocess.run([sys.executable, str(CONFORMANCE / "gen_decode.py"), idmint_bin()],
                          capture_output=True, text=True, timeout=120, check=True)
    fresh = json.loads(done.stdout)
    committed = json.loads((CONFORMANCE / "decode.json").read_text())
    assert fresh == committed, "regenerate: see clients/conformance/README.md"
