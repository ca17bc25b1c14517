"""A tensor's dims and reshape as Triton's ValidateIOShape checks them."""

from __future__ import annotations

import math

# A variable-size dimension.
WILDCARD_DIM = -1


class ShapeError(ValueError):
    """A shape Triton refuses; the message names the tensor (the caller's ``label``)."""


def check_shape(
    label: str, dims: tuple[int, ...], reshape: tuple[int, ...] | None, max_batch_size: int
) -> None:
    """Triton's ValidateIOShape: dims are required; an empty reshape (a scalar per batch
    item) needs batching and dims of one element; variable-size segments must match."""
    if not dims:
        raise ShapeError(f"{label}: dims must be set (a scalar is dims: [ 1 ])")
    _check_dims(f"{label}: dims", dims)
    if reshape is None:
        return
    if not reshape and max_batch_size == 0:
        raise ShapeError(
            f"{label}: reshape cannot be empty for a model without batching (max_batch_size 0)"
        )
    _check_dims(f"{label}: reshape", reshape)
    dims_count, reshape_count = _element_count(dims), _element_count(reshape)
    if dims_count != reshape_count and not (reshape_count == 0 and dims_count == 1):
        raise ShapeError(
            f"{label}: reshape {list(reshape)} has a different size than dims {list(dims)}"
        )
    if dims_count == WILDCARD_DIM and _segments(dims) != _segments(reshape):
        raise ShapeError(
            f"{label}: reshape {list(reshape)} does not match dims {list(dims)}: the sizes "
            "between variable-size (-1) dimensions must be equal"
        )


def _check_dims(where: str, shape: tuple[int, ...]) -> None:
    for dim in shape:
        if dim < 1 and dim != WILDCARD_DIM:
            raise ShapeError(
                f"{where} {list(shape)}: each dimension must be an integer >= 1, or -1 for a "
                "variable-size dimension"
            )


def _element_count(shape: tuple[int, ...]) -> int:
    """Triton's element count: -1 if any dimension varies, 0 for an empty shape."""
    if WILDCARD_DIM in shape:
        return WILDCARD_DIM
    return math.prod(shape) if shape else 0


def _segments(shape: tuple[int, ...]) -> list[int]:
    """Element counts of the runs between -1 dims: [2, 4, -1, 6] -> [8, 6]."""
    counts = [1]
    for dim in shape:
        if dim == WILDCARD_DIM:
            counts.append(1)
        else:
            counts[-1] *= dim
    return counts
