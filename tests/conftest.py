"""Suite-wide settings."""

import os

from hypothesis import settings

# pbd imported into this process (unit tests, in-process helpers) runs from its sources, so
# unit tests can hand its functions the fakes they use (mypyc's compiled functions check their
# arguments' types); daemons the tests start run what scripts/native.py compiled (the harness
# drops PBD_* from their environment). Set before any test module imports pbd.
os.environ.setdefault("PBD_NATIVE", "0")

# CI machines have 2 cores shared with daemons under test: no per-example deadline
# (a wall-clock threshold would make property tests flaky).
settings.register_profile("pbd", deadline=None)
settings.load_profile("pbd")
