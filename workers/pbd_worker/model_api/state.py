"""Per-process state the worker runtime sets and the model API reads.

One worker process serves one model instance, so module globals are the natural home. The BLS
and response-sender hooks stay ``None`` until the runtime can deliver those features; the API
then refuses them with a precise message instead of pretending.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pbd_worker.metrics import MetricsChannel

# The hooks take a ``pbd_worker.model_api.request.InferenceRequest``; it is not named here
# because that module reads this one (the API sits above its state).
# ``bls_executor(request, decoupled)`` runs ``request`` on another model and returns an
# ``InferenceResponse`` (or, decoupled, an iterator of them). It blocks; ``async_exec`` calls
# ``bls_async_executor`` instead, which returns an awaitable of the same.
BlsExecutor = Callable[[Any, bool], Any]
# ``response_sender_factory(request)`` returns the request's ``InferenceResponseSender``.
ResponseSenderFactory = Callable[[Any], Any]

bls_executor: BlsExecutor | None = None
bls_async_executor: BlsExecutor | None = None
# ``model_control(op, model_name, **fields)``: load_model / unload_model / is_model_ready
# (``pbd_worker.bls.BlsClient.control``); returns the daemon's reply, raises on its error.
model_control: Callable[..., Any] | None = None
# The worker runtime's channel for custom metrics.
metrics_channel: MetricsChannel | None = None
response_sender_factory: ResponseSenderFactory | None = None

_model_dir: str | None = None


def set_model_dir(path: str) -> None:
    global _model_dir
    _model_dir = path


def model_dir() -> str | None:
    return _model_dir
