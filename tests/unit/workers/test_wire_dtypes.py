"""pbd_wire.dtypes.from_numpy: a dtype's datatype found in the table, or none."""

from __future__ import annotations

import numpy as np

from pbd_wire import dtypes


def test_every_numpy_dtype_of_the_table_finds_its_datatype() -> None:
    for d in dtypes.ALL:
        if d.numpy is not None and not d.is_bytes:
            assert dtypes.from_numpy(d.numpy) is d
            assert dtypes.from_numpy(np.dtype(d.numpy.str)) is d  # "<f4" is float32
    assert dtypes.from_numpy(np.dtype(np.float32).newbyteorder(">")) is None


def test_what_is_not_a_numpy_dtype_yet_names_one_is_looked_up_too() -> None:
    assert dtypes.from_numpy("float32") is dtypes.BY_NAME["FP32"]  # type: ignore[arg-type]
    assert dtypes.from_numpy(np.int8) is dtypes.BY_NAME["INT8"]  # type: ignore[arg-type]
    assert dtypes.from_numpy(np.dtype(object)) is dtypes.BY_NAME["BYTES"]
    assert dtypes.from_numpy(np.dtype("U3")) is dtypes.BY_NAME["BYTES"]
    assert dtypes.from_numpy(np.dtype(np.complex64)) is None
