"""Shared test setup: make `tests/` importable (for runbuilder) and keep GX quiet."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
