"""pbd.modelconfig.shapes: Triton's ValidateIOShape rules for dims and reshape (the rest of a
config's checks: test_repository_config*)."""

from __future__ import annotations

import pytest

from pbd.modelconfig.shapes import ShapeError, check_shape


@pytest.mark.parametrize(
    ("dims", "reshape", "batch"),
    [((4,), None, 0), ((2, 3, -1), (6, -1), 8), ((1,), (), 8), ((-1,), (-1,), 0)],
)
def test_shapes_triton_accepts(dims, reshape, batch) -> None:
    check_shape("input 'x'", dims, reshape, batch)


@pytest.mark.parametrize(
    ("dims", "reshape", "batch", "why"),
    [
        ((), None, 0, "dims must be set"),
        ((0,), None, 0, "each dimension must be an integer >= 1, or -1"),
        ((1,), (), 0, "reshape cannot be empty for a model without batching"),
        ((4,), (5,), 0, "has a different size than dims"),
        ((2, -1, 3), (3, -1, 2), 0, "between variable-size"),
    ],
)
def test_shapes_triton_refuses_name_the_tensor(dims, reshape, batch, why) -> None:
    with pytest.raises(ShapeError, match=why) as info:
        check_shape("input 'x'", dims, reshape, batch)
    assert str(info.value).startswith("input 'x'")
