"""Tests run against the installed `idmint` package (run_tests.sh installs the wheel); the
helpers next to this file (`topology`) are imported from here."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
