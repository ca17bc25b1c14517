"""The daemon <-> worker wire, one implementation with two users: the daemon (``pbd``) and the
worker (``pbd_worker``) both import it, and it imports neither (nor grpc).

- ``worker_pb2``: the control messages, generated from ``protos/pbd_wire/worker.proto`` (whose
  header draws the conversation);
- ``framing``: one message per length-prefixed frame on the Unix socket;
- ``shm``: the shared-memory segments tensors travel in, and the arena that carves them;
- ``cuda``: CUDA IPC handles of GPU tensors (CuPy imported only when one is used);
- ``dtypes``: the protocol's datatype names and their numpy dtypes;
- ``bytes_input``: Triton's check of a BYTES input's elements against its shape;
- ``otlp``: the OTLP span bytes a worker encodes and the daemon forwards.
"""

PROTOCOL_VERSION = 1
# The environment variable that carries a worker's one-time connection token.
TOKEN_ENV = "PBD_WORKER_TOKEN"
# The environment variable that names the CPU scheduling policy a worker puts itself under
# ("batch" or "normal"; the daemon's --worker-scheduling).
SCHEDULING_ENV = "PBD_WORKER_SCHEDULING"
# The direct path: front end k numbers its requests and batches from (k + 1) << FRONT_ID_SHIFT;
# the daemon's ids stay below 1 << FRONT_ID_SHIFT (worker.proto). ``front_of(id)`` is the index
# of the front end an id belongs to, or -1 for the daemon's (streamed held ids, top bit set,
# are the worker's own: masked off first).
FRONT_ID_SHIFT = 40
# A decoupled request a front end sent: how many of its streamed responses with outputs the
# worker lets wait for their release before its sender's send() waits (pbd_worker.live_requests);
# the front end tells releases at once when a request has that many out (worker_client.releases).
RESPONSES_AHEAD = 4
_ID_MASK = (1 << 63) - 1


def front_base(front: int) -> int:
    """The first id of front end ``front`` (its ids are this plus 1, 2, ...)."""
    return (front + 1) << FRONT_ID_SHIFT


def front_of(ident: int) -> int:
    return ((ident & _ID_MASK) >> FRONT_ID_SHIFT) - 1
