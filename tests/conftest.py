"""Suite-wide settings."""

from hypothesis import settings

# CI machines have 2 cores shared with daemons under test: no per-example deadline
# (a wall-clock threshold would make property tests flaky).
settings.register_profile("pbd", deadline=None)
settings.load_profile("pbd")
