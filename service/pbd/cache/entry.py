"""One cached response: the outputs copied out of shared memory, and their size as Triton
counts it."""

from __future__ import annotations

from dataclasses import dataclass

from pbd.types import InferRequest, InferResult, OutputTensor, ParamValue

# Triton's packed entry: a uint32 output count, then per output a uint64 length, the name and
# datatype each behind a uint32 length, the shape behind a uint32 length, the bytes behind a
# uint64 length. Sizes are counted the same way, so the same --cache-config size holds about as
# many entries.
_ENTRY_HEADER = 4
_OUTPUT_HEADER = 8 + 4 + 4 + 4 + 8


@dataclass(frozen=True)
class CachedOutput:
    name: str
    datatype: str
    shape: tuple[int, ...]
    data: bytes


@dataclass(frozen=True)
class CachedResponse:
    outputs: tuple[CachedOutput, ...]
    parameters: tuple[tuple[str, ParamValue], ...]

    @classmethod
    def of(cls, result: InferResult) -> CachedResponse:
        """The outputs of ``result`` copied (the result's memory goes back to its worker)."""
        return cls(
            tuple(CachedOutput(o.name, o.datatype, o.shape, bytes(o.data)) for o in result.outputs),
            tuple(result.parameters.items()),
        )

    @property
    def nbytes(self) -> int:
        return _ENTRY_HEADER + sum(
            _OUTPUT_HEADER + len(o.name) + len(o.datatype) + 8 * len(o.shape) + len(o.data)
            for o in self.outputs
        )

    def result(self, request: InferRequest, model: str, version: str) -> InferResult:
        """The answer to ``request``: views of the cached bytes (nothing to release); the
        response parameters are its own (an edge may add to them)."""
        return InferResult(
            model,
            version,
            request.id,
            [OutputTensor(o.name, o.datatype, o.shape, memoryview(o.data)) for o in self.outputs],
            dict(self.parameters),
        )
