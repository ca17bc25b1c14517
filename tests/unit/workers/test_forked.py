"""BLS from a process the model forks: a real ``os.fork()`` of this process with the relay
installed. The child's call crosses the socket pair made at the fork, the parent's relay
thread runs it with the BLS executor installed here (a real function standing where the
worker's BlsClient stands), and the child gets the response; the child never writes on the
inherited daemon connection (the daemon's end of it stays silent).
"""

from __future__ import annotations

import os
import pickle
import select
import socket
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from pbd_worker import forked
from pbd_worker.ipc.daemon_link import DaemonLink
from pbd_worker.model_api import state
from pbd_worker.model_api.errors import TritonError, TritonModelException
from pbd_worker.model_api.request import InferenceRequest
from pbd_worker.model_api.response import InferenceResponse
from pbd_worker.model_api.tensor import Tensor

WAIT_S = 30.0


def add_one(request: InferenceRequest, decoupled: bool) -> Any:
    """What the parent's BLS answers: X + 1 (twice, then an empty final one, when decoupled);
    model "missing" gets an error response, model "refused" raises."""
    if request.model_name() == "refused":
        raise TritonModelException("BLS is only supported during the 'execute' function.")
    if request.model_name() == "missing":
        return InferenceResponse(error=TritonError("no such model", TritonError.NOT_FOUND))
    x = request.inputs()[0].as_numpy()
    answer = InferenceResponse([Tensor("Y", x + 1)], parameters={"pid": os.getpid()})
    if not decoupled:
        return answer
    return iter([answer, answer, InferenceResponse([])])


@pytest.fixture
def relay(
    linked: tuple[DaemonLink, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> Iterator[socket.socket]:
    """The relay installed over a connected link; yields the daemon's end of it."""
    link, daemon_end = linked
    monkeypatch.setattr(state, "bls_executor", add_one)
    monkeypatch.setattr(state, "bls_async_executor", None)
    monkeypatch.setattr(state, "model_control", lambda op, name, **fields: (op, name, fields))
    forked.install(link)
    try:
        yield daemon_end
    finally:
        forked.install(None)  # forks of later tests relay nothing


def in_child(work: Any) -> Any:
    """``work()`` in a forked child: ("ok", what it returned) or ("raised", class, text)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running the parent's cleanup
        os.close(read_end)
        try:
            outcome: Any = ("ok", work())
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            outcome = ("raised", type(exc).__name__, str(exc))
        os.write(write_end, pickle.dumps(outcome))
        os._exit(0)
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], WAIT_S)
        assert ready, "the child did not answer in time"
        return pickle.loads(os.read(read_end, 1 << 20))  # noqa: S301 - our child's
    finally:
        os.close(read_end)
        assert os.waitpid(pid, 0)[1] == 0


def call(model: str = "add", decoupled: bool = False) -> Any:
    request = InferenceRequest(
        model_name=model, inputs=[Tensor("X", np.arange(3, dtype=np.int64))],
        requested_output_names=["Y"],
    )  # fmt: skip
    return request.exec(decoupled=decoupled)


def test_a_forked_childs_call_is_answered_by_its_parent(relay: socket.socket) -> None:
    def work() -> Any:
        response = call()
        return response.output_tensors()[0].as_numpy().tolist(), response.parameters()

    outcome, (values, parameters) = in_child(work)
    assert (outcome, values) == ("ok", [1, 2, 3])
    assert str(os.getpid()) in parameters  # the parent ran it
    relay.setblocking(False)
    with pytest.raises(BlockingIOError):
        relay.recv(1)  # the child wrote nothing on the daemon connection


def test_errors_come_back_as_in_the_parent(relay: socket.socket) -> None:
    def work() -> Any:
        response = call("missing")
        return response.error().message(), response.error().code()

    assert in_child(work) == ("ok", ("no such model", TritonError.NOT_FOUND))
    refused = in_child(lambda: call("refused"))
    assert refused == ("raised", "TritonModelException", refused[2])
    assert "only supported during the 'execute'" in refused[2]


def test_a_decoupled_call_and_model_control_from_a_child(relay: socket.socket) -> None:
    def work() -> Any:
        responses = call(decoupled=True)
        first = [len(r.output_tensors()) for r in responses]
        again = [len(r.output_tensors()) for r in responses]  # a finished iterator replays
        control = state.model_control
        assert control is not None
        return first, again, control("ready", "add", version="1")

    outcome, (first, again, control) = in_child(work)
    assert outcome == "ok" and first == again == [1, 1, 0]
    assert control == ("ready", "add", {"version": "1"})


def test_the_childs_copy_of_the_daemon_connection_is_closed(relay: socket.socket) -> None:
    def work() -> Any:
        assert forked._link is not None
        return forked._link.sock is None

    assert in_child(work) == ("ok", True)
