"""One request through an ensemble: its steps started as their inputs appear, its answers.

Each step runs as a task of its own (``pbd.ensemble.step_call``), started the moment
``pbd.ensemble.graph`` says its inputs exist; when any step fails, the others are cancelled
and the request fails with that step's error. The steps' results (whose shared memory the
ensemble's tensors are) are held until the request is over and every answer made of them has
been released.

A decoupled ensemble answers once per flow that completes its outputs. As Triton does, the
final flag rides on the last answer: each answer is held back until the next one comes or the
request ends, so a stream never ends with a final flag alone unless there was no answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from pbd.ensemble.graph import EnsembleGraph, Flow
from pbd.ensemble.step_call import Tensor, run_step, step_input
from pbd.errors import Code, PbdError
from pbd.modelconfig.ensemble import Step
from pbd.responses import ResponseStream, StreamResult
from pbd.types import InferResult, OutputTensor, PreparedRequest, RequestedOutput

if TYPE_CHECKING:
    from pbd.dataplane import DataPlane


class EnsembleRequest:
    def __init__(
        self,
        dataplane: DataPlane,
        graph: EnsembleGraph,
        prepared: PreparedRequest,
        model: tuple[str, str],
    ) -> None:
        self.dp = dataplane
        self.graph = graph
        self.prepared = prepared
        self.model_name, self.model_version = model
        self._results: list[InferResult] = []  # every step's, held while tensors are in use
        self._users = 1  # this run, and each answer not yet released
        self._tasks: set[asyncio.Task[None]] = set()
        self._on_answer: Callable[[InferResult], None] = lambda result: None

    async def single(self) -> InferResult:
        """The one answer of a non-decoupled ensemble."""
        answers: list[InferResult] = []
        self._on_answer = answers.append
        try:
            await self._run()
        except BaseException:
            for answer in answers:
                answer.release()
            raise
        if len(answers) != 1:
            for answer in answers:
                answer.release()
            raise PbdError(
                Code.INTERNAL,
                f"in ensemble {self.model_name}, the request produced {len(answers)} responses "
                "instead of one",
            )
        return answers[0]

    async def stream(self, stream: ResponseStream) -> None:
        """Every answer into ``stream``, the last one final."""
        held: list[InferResult] = []

        def answer(result: InferResult) -> None:
            if held:
                stream.put(StreamResult(result=held.pop()))
            held.append(result)

        self._on_answer = answer
        try:
            await self._run()
        except BaseException:
            if held:  # sent: it was complete before the failure
                stream.put(StreamResult(result=held.pop()))
            raise
        stream.put(StreamResult(result=held.pop() if held else None, final=True))

    async def _run(self) -> None:
        inputs: dict[str, Tensor] = {t.name: t for t in self.prepared.inputs}
        self._launch(self.graph.start(inputs))
        try:
            while self._tasks:
                done, _ = await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    self._tasks.discard(task)
                    task.result()  # a step's error fails the request
        except BaseException:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            raise
        finally:
            self._drop()

    def _launch(self, flow: Flow[Tensor]) -> None:
        for step in self.graph.take_ready(flow):
            self._tasks.add(asyncio.ensure_future(self._step(flow, step)))

    async def _step(self, flow: Flow[Tensor], step: Step) -> None:
        inputs = [step_input(name, flow.tensors[t]) for name, t in step.input_map.items()]
        wanted = self._targets(step)
        async for result in run_step(self.dp, step, inputs, wanted, self.prepared.request):
            self._results.append(result)
            if not result.outputs:
                continue  # a decoupled step's response without tensors starts nothing
            outputs: Mapping[str, Tensor] = {o.name: o for o in result.outputs}
            try:
                target = self.graph.add(flow, step, outputs)
            except KeyError as exc:
                raise PbdError(
                    Code.INTERNAL,
                    f"in ensemble {self.model_name}, step {step.index} (model "
                    f"'{step.model_name}') returned no output {exc}",
                ) from None
            answer = self.graph.answer(target)
            if answer is not None:
                self._answer(answer)
            self._launch(target)

    def _targets(self, step: Step) -> list[RequestedOutput]:
        """The step's outputs with the client's shared-memory parameters of the ensemble
        outputs it produces, so its worker writes them into the client's region (not one a
        later step reads: that step would find it empty). Empty: none is aimed anywhere."""
        aimed = {
            o.name: o.parameters
            for o in self.prepared.request.outputs
            if o.name in self.prepared.output_targets and o.name not in self.graph.read
        }
        if not any(t in aimed for t in step.output_map.values()):
            return []
        return [RequestedOutput(n, dict(aimed.get(t, {}))) for n, t in step.output_map.items()]

    def _answer(self, tensors: Mapping[str, Tensor]) -> None:
        wanted = self.prepared.requested_outputs or list(tensors)
        outputs = []
        for name in wanted:
            tensor = tensors[name]
            assert isinstance(tensor, OutputTensor)  # spec: every output is a step's
            outputs.append(
                OutputTensor(
                    name, tensor.datatype, tensor.shape, tensor.data, tensor.region, tensor.offset
                )
            )
        self._users += 1
        self._on_answer(
            InferResult(
                self.model_name,
                self.model_version,
                self.prepared.request.id,
                outputs,
                _release=self._drop,
            )
        )

    def _drop(self) -> None:
        self._users -= 1
        if self._users == 0:
            results, self._results = self._results, []
            for result in results:
                result.release()
