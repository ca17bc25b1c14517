"""``pb_utils.InferenceResponse``: output tensors, or an error, plus optional parameters."""

from __future__ import annotations

from collections.abc import Sequence

from pbd_worker.model_api.errors import TritonError, TritonModelException
from pbd_worker.model_api.parameters import parameters_to_json
from pbd_worker.model_api.tensor import Tensor


class InferenceResponse:
    """``InferenceResponse(output_tensors=[], error=None, parameters=None)``.

    ``parameters`` is a dict of str to bool/int/str; they reach the client as response parameters.
    """

    def __init__(
        self,
        output_tensors: Sequence[Tensor] = (),
        error: TritonError | None = None,
        parameters: dict[str, bool | int | str] | None = None,
    ) -> None:
        if not isinstance(output_tensors, list | tuple):  # None too, as Triton's binding
            raise TypeError(
                f"output_tensors must be a list of pb_utils.Tensor, got "
                f"{type(output_tensors).__name__}"
            )
        for tensor in output_tensors:
            if tensor is None:  # Triton's stub checks each tensor (TritonModelException)
                raise TritonModelException("Output tensor cannot be None.")
            if not isinstance(tensor, Tensor):
                raise TypeError(
                    f"output_tensors must hold pb_utils.Tensor objects, got {type(tensor).__name__}"
                )
        if error is not None and not isinstance(error, TritonError):
            raise TypeError(
                f"error must be a pb_utils.TritonError or None, got {type(error).__name__}"
            )
        self._output_tensors = list(output_tensors)
        self._error = error
        self._parameters_json = parameters_to_json(parameters)

    def output_tensors(self) -> list[Tensor]:
        return self._output_tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        """The response parameters as a JSON object string (``"{}"`` when none)."""
        return self._parameters_json

    def __repr__(self) -> str:
        if self._error is not None:
            return f"InferenceResponse(error={self._error!r})"
        names = [t.name() for t in self._output_tensors]
        return f"InferenceResponse(outputs={names})"
