"""The dependency scheduler of one ensemble request, pure: which steps can start now.

A step starts as soon as every tensor it reads exists, so steps that do not depend on each
other run at the same time (Triton schedules ensemble steps the same way). Tensors live in a
:class:`Flow`: a request starts with one, holding the ensemble's inputs and waiting to start
every step. A non-decoupled step's outputs join the flow it ran in. Each response of a
decoupled step starts a flow of its own (Triton: each response triggers the downstream steps
again): its tensors are those of the flow plus that response's outputs, and it waits to start
only the steps downstream of the decoupled step, which the original flow then never starts.
Load-time validation (``pbd.ensemble.validate``) makes sure no step reads tensors of two
different flows. A flow that holds every ensemble output is answered once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from pbd.modelconfig.ensemble import EnsembleSpec, Step

T = TypeVar("T")


@dataclass
class Flow(Generic[T]):
    tensors: dict[str, T]
    waiting: set[int]  # indices of the steps not started yet
    answered: bool = False


@dataclass(frozen=True)
class EnsembleGraph:
    spec: EnsembleSpec
    decoupled: frozenset[int] = frozenset()  # indices of the decoupled steps
    # step index -> the steps that read, directly or not, what it writes
    downstream: Mapping[int, frozenset[int]] = field(init=False)
    read: frozenset[str] = field(init=False)  # the tensors some step reads

    def __post_init__(self) -> None:
        readers: dict[str, list[int]] = {}
        for step in self.spec.steps:
            for tensor in step.input_map.values():
                readers.setdefault(tensor, []).append(step.index)
        below: dict[int, frozenset[int]] = {}
        for step in self.spec.steps:
            seen: set[int] = set()
            todo = [step.index]
            while todo:
                current = self.spec.steps[todo.pop()]
                for tensor in current.output_map.values():
                    for reader in readers.get(tensor, ()):
                        if reader not in seen:
                            seen.add(reader)
                            todo.append(reader)
            below[step.index] = frozenset(seen)
        object.__setattr__(self, "downstream", below)
        object.__setattr__(self, "read", frozenset(readers))

    def start(self, inputs: Mapping[str, T]) -> Flow[T]:
        return Flow(dict(inputs), {s.index for s in self.spec.steps})

    def take_ready(self, flow: Flow[T]) -> list[Step]:
        """The steps of ``flow`` whose inputs all exist, now counted as started. A decoupled
        step takes the steps downstream of it out of ``flow``: its responses' flows run them."""
        ready = [
            self.spec.steps[i]
            for i in sorted(flow.waiting)
            if all(t in flow.tensors for t in self.spec.steps[i].input_map.values())
        ]
        for step in ready:
            flow.waiting.discard(step.index)
            if step.index in self.decoupled:
                flow.waiting -= self.downstream[step.index]
        return ready

    def add(self, flow: Flow[T], step: Step, outputs: Mapping[str, T]) -> Flow[T]:
        """``outputs`` (by the step model's output name) of one response of ``step``, which ran
        in ``flow``: the flow they now live in (``flow`` itself, or a new one for a decoupled
        step). Raises KeyError naming an output the response lacks."""
        mapped = {tensor: outputs[name] for name, tensor in step.output_map.items()}
        if step.index not in self.decoupled:
            flow.tensors.update(mapped)
            return flow
        return Flow({**flow.tensors, **mapped}, set(self.downstream[step.index]))

    def answer(self, flow: Flow[T]) -> dict[str, T] | None:
        """The ensemble's outputs, the first time ``flow`` holds all of them."""
        if flow.answered or any(t not in flow.tensors for t in self.spec.outputs):
            return None
        flow.answered = True
        return {name: flow.tensors[name] for name in self.spec.outputs}
