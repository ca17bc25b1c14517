"""``--http-restricted-api``: a route of a restricted group needs its header, whoever answers
it: the daemon (``--frontends 1``) or front-end processes (``--frontends 2``: /infer answered
there, control routes passed on to the daemon), with tritonclient.http as the client."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from pbd_harness import EXAMPLE_MODELS, DaemonFactory, error_of, make_repository

HEADER = {"Admin-Key": "s3cret"}
REFUSED = "This API is restricted, expecting header 'Admin-Key'"


def _inputs() -> list[httpclient.InferInput]:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = httpclient.InferInput(name, [4], "FP32")
        tensor.set_data_from_numpy(np.arange(4, dtype=np.float32))
        inputs.append(tensor)
    return inputs


@pytest.mark.parametrize("fronts", ["1", "2"])
def test_restricted_routes_need_the_header(
    start_daemon: DaemonFactory, tmp_path: Path, fronts: str
) -> None:
    repository = make_repository(tmp_path, {"add_sub": EXAMPLE_MODELS / "add_sub"})
    daemon = start_daemon(
        repository,
        "--frontends", fronts,
        "--http-restricted-api", "inference,model-repository:Admin-Key=s3cret",
        settle=["add_sub"],
    )  # fmt: skip
    client = httpclient.InferenceServerClient(daemon.http_url)
    try:
        wrong: list[dict[str, str] | None] = [
            None, {"Admin-Key": "wrong"}, {"triton-grpc-protocol-Admin-Key": "s3cret"}
        ]  # fmt: skip
        for h in wrong:
            for call in (
                lambda h=h: client.infer("add_sub", _inputs(), headers=h),
                lambda h=h: client.get_model_repository_index(headers=h),
                lambda h=h: client.unload_model("add_sub", headers=h),
            ):
                refused = error_of(call)
                assert (refused.status(), refused.message()) == ("403", REFUSED)
        result = client.infer("add_sub", _inputs(), headers=HEADER)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.arange(4) * 2)
        index = client.get_model_repository_index(headers={"admin-key": "s3cret"})
        assert [(m["name"], m["state"]) for m in index] == [("add_sub", "READY")]
        # Groups left open stay open; gRPC is not restricted by the HTTP flag.
        assert client.is_server_ready() and client.get_model_config("add_sub")["name"] == "add_sub"
        assert daemon.client().get_model_repository_index().models[0].name == "add_sub"
    finally:
        client.close()
