"""A dataplane for the edges' unit tests: the methods the gRPC servicer and the HTTP server
call, over one model, ``echo`` (INPUT0 FP32 [4] -> OUTPUT0, the same bytes), with the errors
the real one raises for a model it does not know. What the edges do with real models is in
tests/integration."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from config_samples import parse

from pbd.errors import Code, PbdError
from pbd.modelconfig.model import ModelConfig
from pbd.types import IndexEntry, InferRequest, InferResult, OutputTensor

ECHO = parse(
    'backend: "python"\n'
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n',
    name="echo",
)
UNKNOWN = "Request for unknown model: '{name}' is not found"


class EchoPlane:
    def __init__(self) -> None:
        self.ready = True
        self.answer_early = False  # answer as an instance does, where the result is read
        self.released: list[str] = []  # ids of the results whose memory came back
        self.requests: list[InferRequest] = []

    def server_live(self) -> bool:
        return True

    def server_ready(self) -> bool:
        return self.ready

    def server_metadata(self) -> tuple[str, str, tuple[str, ...]]:
        return "pbd", "0.1.0", ("model_repository", "statistics")

    def _config(self, name: str) -> ModelConfig:
        if name != "echo":
            raise PbdError(Code.UNAVAILABLE, UNKNOWN.format(name=name))
        return ECHO

    def model_ready(self, name: str, version: str) -> bool:
        return name == "echo"

    def repository_index(self, repository_name: str, ready_only: bool) -> list[IndexEntry]:
        return [IndexEntry("echo", "1", "READY", "")]

    async def model_ready_checked(self, name: str, version: str) -> bool:
        return self.model_ready(name, version)

    def model_metadata(self, name: str, version: str) -> tuple[ModelConfig, list[str]]:
        return self._config(name), ["1"]

    def model_config(self, name: str, version: str) -> ModelConfig:
        return self._config(name)

    def is_decoupled(self, request: InferRequest) -> bool:
        return False

    def start_trace(self, request: InferRequest, *args: Any, **kwargs: Any) -> None:
        return None  # tracing off

    async def infer(self, request: InferRequest) -> InferResult:
        self._config(request.model_name)
        self.requests.append(request)
        (tensor,) = request.inputs
        assert tensor.data is not None
        output = OutputTensor("OUTPUT0", tensor.datatype, tensor.shape, tensor.data)
        result = InferResult("echo", "1", request.id, [output], _release=self._releasing(request))
        if self.answer_early and request.respond is not None:
            request.respond(result)
        return result

    def _releasing(self, request: InferRequest) -> Callable[[], None]:
        return lambda: self.released.append(request.id)
