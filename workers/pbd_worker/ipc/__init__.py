"""The daemon <-> worker wire: framing, shared-memory segments and tensor descriptors.

One implementation with two users: the worker runtime and the daemon (``pbd.instances``)
both import this package. The message schema is ``protos/pbd_worker/_proto/worker.proto``.
"""

PROTOCOL_VERSION = 1
# The environment variable that carries a worker's one-time connection token.
TOKEN_ENV = "PBD_WORKER_TOKEN"
