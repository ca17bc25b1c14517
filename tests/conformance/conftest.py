"""The conformance client builds on the unit tests' raw HTTP/2 peer (``h2_peer``)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "service"))
