"""BLS from processes the model forks (``multiprocessing.Pool`` in ``execute()``, as Triton's
QA does).

A forked child inherits the worker's connection to the daemon, its locks (perhaps held, at the
fork, by a thread the child does not have), its arena's allocator and its call ids. Using them
mixes the child's frames with the worker's on one socket, has the child create segments under
names the worker creates too, and waits on locks nobody will release: the children hung, and
the worker's next output segment collided with one a child had made.

So a child touches none of it. At each fork (``os.register_at_fork``) the worker makes a socket
pair; the child keeps one end and a relay thread of the worker the other. The child's
``exec()``, ``async_exec()`` and model control send the request over it (the tensors as numpy
arrays, pickled: both ends are the same model's processes); the relay runs it with the
worker's own BLS client, as a call from a model thread (the same instance, deadlock checks and
trace), and sends the responses back. The child's copy of the daemon connection is closed.

Why through the worker, not a connection of the child's own to the daemon: the daemon would
have to authenticate a second connection per instance (the worker's token is single-use, in
its environment), give the child segments of its own and sweep them when it exits, and count it
as the instance in its deadlock checks. The relay needs nothing of the daemon and costs a copy
of each tensor, on a path that is rare. A decoupled call from a child returns its iterator once
the callee's final response is in. A grandchild's calls go through its parent's relay the same
way. Custom metrics and response senders stay the worker's own.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import socket
import struct
import threading
from collections.abc import Awaitable, Iterator
from typing import Any

from pbd_worker.bls import ResponseIterator
from pbd_worker.ipc.daemon_link import DaemonLink
from pbd_worker.model_api import state
from pbd_worker.model_api.errors import TritonError, TritonModelException
from pbd_worker.model_api.request import InferenceRequest
from pbd_worker.model_api.response import InferenceResponse
from pbd_worker.model_api.tensor import Tensor

_LENGTH = struct.Struct("<Q")
_GONE = "the worker process this process was forked from is gone"

_link: DaemonLink | None = None  # the worker's connection (None: nothing to relay for)
_registered = False
_forking = threading.local()  # the socket pair of the fork this thread is making


def install(link: DaemonLink | None) -> None:
    """Relay BLS for the processes forked from here while ``link`` is connected (None: relay
    nothing)."""
    global _link, _registered
    _link = link
    if not _registered:
        os.register_at_fork(before=_before, after_in_parent=_in_parent, after_in_child=_in_child)
        _registered = True


def _relaying() -> bool:
    return _link is not None and (_link.sock is not None or isinstance(state.bls_executor, _Up))


def _before() -> None:
    _forking.pair = socket.socketpair() if _relaying() else None


def _taken() -> tuple[socket.socket, socket.socket] | None:
    """The socket pair ``_before`` made for this fork (once)."""
    pair: tuple[socket.socket, socket.socket] | None = getattr(_forking, "pair", None)
    _forking.pair = None
    return pair


def _in_parent() -> None:
    pair = _taken()
    if pair is None:
        return
    ours, theirs = pair
    theirs.close()
    threading.Thread(target=_serve, args=(ours,), name="pbd-fork-relay", daemon=True).start()


def _in_child() -> None:
    pair = _taken()
    if pair is None:
        return
    parents, ours = pair
    parents.close()
    assert _link is not None
    _link.forget_after_fork()
    up = _Up(ours)
    state.bls_executor = up
    state.bls_async_executor = up.exec_async
    state.model_control = up.control


# -- the wire between the two processes ----------------------------------------------------------


def _send(sock: socket.socket, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_LENGTH.pack(len(data)) + data)


def _receive(sock: socket.socket) -> Any:
    """The next message; None when the other process is gone."""
    header = _read(sock, _LENGTH.size)
    if header is None:
        return None
    data = _read(sock, _LENGTH.unpack(header)[0])
    return None if data is None else pickle.loads(data)  # noqa: S301 - our own fork's


def _read(sock: socket.socket, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _request_fields(request: InferenceRequest) -> dict[str, Any]:
    return {
        "inputs": [(t.name(), t.as_numpy()) for t in request.inputs()],
        "request_id": request.request_id(),
        "correlation_id": request.correlation_id(),
        "requested_output_names": sorted(request.requested_output_names()),
        "flags": request.flags(),
        "timeout": request.timeout(),
        "parameters_json": request.parameters(),
        "model_name": request.model_name(),
        "model_version": request.model_version(),
        "trace_context": request.trace().get_context(),
    }


def _request(fields: dict[str, Any]) -> InferenceRequest:
    inputs = [Tensor(name, array) for name, array in fields.pop("inputs")]
    return InferenceRequest._from_runtime(inputs=inputs, **fields)


def _response_fields(response: InferenceResponse) -> tuple[Any, ...]:
    error = response.error()
    if error is not None:
        return ("error", error.message(), error.code())
    outputs = [(t.name(), t.as_numpy()) for t in response.output_tensors()]
    return ("outputs", outputs, response.parameters())


def _response(fields: tuple[Any, ...]) -> InferenceResponse:
    if fields[0] == "error":
        return InferenceResponse(error=TritonError(fields[1], fields[2]))
    response = InferenceResponse([Tensor(name, array) for name, array in fields[1]])
    response._parameters_json = fields[2]
    return response


# -- the worker's side: a relay thread per child -------------------------------------------------


def _serve(sock: socket.socket) -> None:
    with sock:
        while (message := _receive(sock)) is not None:
            try:
                for reply in _answers(message):
                    _send(sock, reply)
            except OSError:
                return  # the child is gone


def _answers(message: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
    """The replies to one message of a child: ("response", ...) per response then ("end",),
    ("reply", BlsReply) for model control, or ("raise", class name, text)."""
    try:
        if message[0] == "control":
            _, op, model_name, fields = message
            if state.model_control is None:
                raise TritonModelException("model control is not available")
            yield ("reply", state.model_control(op, model_name, **fields))
            return
        _, fields, decoupled = message
        if state.bls_executor is None:
            raise TritonModelException("BLS is not available")
        answer = state.bls_executor(_request(fields), decoupled)
        for response in answer if decoupled else [answer]:
            yield ("response", _response_fields(response))
        yield ("end",)
    except (TritonModelException, TypeError, ValueError) as exc:
        yield ("raise", type(exc).__name__, str(exc))


# -- the child's side ----------------------------------------------------------------------------


class _Up:
    """BLS and model control of a forked process, through its parent's relay. One call at a
    time: a second thread waits for the first call's answer."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lock = threading.Lock()

    def __call__(self, request: InferenceRequest, decoupled: bool) -> Any:
        replies = self._ask(("exec", _request_fields(request), decoupled))
        responses = [_response(reply[1]) for reply in replies if reply[0] == "response"]
        return ResponseIterator.answered(responses) if decoupled else responses[0]

    def exec_async(self, request: InferenceRequest, decoupled: bool) -> Awaitable[Any]:
        return asyncio.get_running_loop().run_in_executor(None, self, request, decoupled)

    def control(self, op: str, model_name: str, **fields: Any) -> Any:
        return self._ask(("control", op, model_name, fields))[-1][1]

    def _ask(self, message: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        replies: list[tuple[Any, ...]] = []
        with self.lock:
            try:
                _send(self.sock, message)
                while True:
                    reply = _receive(self.sock)
                    if reply is None:
                        raise TritonModelException(_GONE)
                    replies.append(reply)
                    if reply[0] in ("end", "reply", "raise"):
                        break
            except OSError:
                raise TritonModelException(_GONE) from None
        if replies[-1][0] == "raise":
            _, kind, text = replies[-1]
            raise {"TypeError": TypeError, "ValueError": ValueError}.get(
                kind, TritonModelException
            )(text)
        return replies
