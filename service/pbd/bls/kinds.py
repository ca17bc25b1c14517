"""The worker-to-daemon messages that are BLS: an instance hands these to the BLS service.

A leaf module (it imports nothing), so the instance that routes its worker's messages does not
import the service, which sits above it (the service runs calls through the dataplane).
"""

from __future__ import annotations

KINDS = frozenset({"bls_call", "bls_done", "bls_control", "bls_cancel", "pool_alloc"})
