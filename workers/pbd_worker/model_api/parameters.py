"""Request and response parameters: a dict of str keys to bool/int/str values, carried as JSON."""

from __future__ import annotations

import json

from pbd_worker.model_api.errors import TritonModelException


def parameters_to_json(parameters: object) -> str:
    """Validate ``parameters`` (``None`` means none) and return their JSON text.

    Floats and nested values are refused, as Triton does, with Triton's messages.
    """
    if parameters is None:
        return "{}"
    if not isinstance(parameters, dict):
        raise TritonModelException(f"Expect dict, got {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(
                f"Expect parameters keys to have type str, found type {type(key)}"
            )
        if not isinstance(value, bool | int | str):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}"
            )
    return json.dumps(parameters)
