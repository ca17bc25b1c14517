"""Memory for shared tensors that runs out fails only the request that needed it.

The daemon's segments are memfds, counted against the service's memory limit. The daemon
here runs with an 8 MiB file-size limit (``FileSizeLimitedDaemon``), so a 16 MiB tensor
cannot be placed: the kernel refuses the segment's reservation (posix_fallocate), the request
gets RESOURCE_EXHAUSTED with the sizes and the fix, and the same daemon keeps serving smaller
requests.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pbd_harness import EXAMPLE_MODELS, FileSizeLimitedDaemon, error_of, infer_input

LIMIT_BYTES = 8 * 1024 * 1024


def test_memory_that_runs_out_fails_only_the_request_that_needed_it(tmp_path: Path) -> None:
    daemon = FileSizeLimitedDaemon(
        EXAMPLE_MODELS,
        tmp_path,
        ("--shm-default-byte-size", str(1 << 20), "--shm-growth-byte-size", str(1 << 20)),
        limit=LIMIT_BYTES,
    )
    try:
        daemon.start()
        daemon.wait_settled(["identity_fp32", "add_sub"])
        client = daemon.client()

        def identity(elements: int) -> np.ndarray:
            data = np.arange(elements, dtype=np.float32).reshape(1, elements)
            result = client.infer("identity_fp32", [infer_input("INPUT0", data, "FP32")])
            out = result.as_numpy("OUTPUT0")
            assert np.array_equal(out, data)
            return out

        identity(1024)
        big = np.zeros((1, 4 * 1024 * 1024), np.float32)  # 16 MiB > the 8 MiB limit
        error = error_of(
            lambda: client.infer("identity_fp32", [infer_input("INPUT0", big, "FP32")])
        )
        assert error.status() == "StatusCode.RESOURCE_EXHAUSTED", error
        message = error.message()
        assert f"needed {16 * 1024 * 1024} bytes" in message
        assert "bytes are available" in message and "raise the memory limit" in message
        # Triton's words too, which its QA looks for
        assert "Failed to increase the shared memory pool size for key 'pbdtest" in message
        # Nothing half-made is held, and everyone else is still served.
        assert all(size <= LIMIT_BYTES for size in daemon.segment_sizes().values())
        identity(1024)
        a = np.arange(4, dtype=np.float32)
        result = client.infer(
            "add_sub", [infer_input("INPUT0", a, "FP32"), infer_input("INPUT1", a, "FP32")]
        )
        assert result.as_numpy("OUTPUT0").tolist() == [0.0, 2.0, 4.0, 6.0]
        assert daemon.stop() == 0, daemon.log_tail()
        daemon.assert_clean_exit()
    finally:
        daemon.stop()
