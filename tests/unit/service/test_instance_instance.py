"""pbd.instance.instance: the BLS message kinds are worker-to-daemon messages of the wire, and the
worker's only BLS messages."""

from __future__ import annotations

from pbd.instance.instance import BLS_KINDS
from pbd_wire import worker_pb2 as wpb


def test_every_bls_kind_is_a_worker_to_daemon_message() -> None:
    fields = {f.name for f in wpb.WorkerToDaemon.DESCRIPTOR.oneofs_by_name["kind"].fields}
    assert {f for f in fields if f.startswith(("bls_", "pool_"))} == BLS_KINDS
