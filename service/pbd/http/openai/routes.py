"""The OpenAI API on the HTTP binding: ``GET /v1/models[/<model>]``, ``POST /v1/completions``
and ``POST /v1/chat/completions``, streamed (server-sent chunks, then ``data: [DONE]``) or not,
and ``POST /v1/embeddings``.

Each choice is one request of the model, run through the plane's ``infer_stream`` (so every
model that follows the convention serves, decoupled or not; in a front end, on its direct
path: ``pbd.http.generate`` says how): ``n`` choices of ``p`` prompts
are ``n * p`` requests at once, choice ``i`` of a prompt getting ``seed + i`` when a seed is
given (so the choices differ, and each is reproducible). A request that cannot start (a bad
input, a full queue) is answered as an error object with its status before anything is
streamed; an error later in a stream is a ``data: {"error": {...}}`` chunk that ends it. A
client that disconnects, or reads slower than ``--http-stream-buffer-bytes`` allows, cancels
every request of its answer (:mod:`pbd.http.sse`). Each request is traced as an HTTP
inference (the route's server span, a response span per piece) and counted in the model's
statistics and metrics like any other. A chat choice's text becomes its message (tool calls,
a checked response_format) through its :class:`MessageReader`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from pbd.errors import Code, PbdError
from pbd.http.elsewhere import Elsewhere, body_target
from pbd.http.encoding import compress
from pbd.http.generate_json import encode
from pbd.http.openai.answers import Choice, Header, Usage, model_object
from pbd.http.openai.api_keys import ApiKeys
from pbd.http.openai.chat_template import ChatTemplate, TemplateError
from pbd.http.openai.convention import (
    build_request,
    follows_convention,
    read_response,
    returns_logprobs,
    takes_guide,
    takes_stop,
)
from pbd.http.openai.embeddings import (
    build_embedding_request,
    embeddings_answer,
    embeds,
    parse_embeddings,
    read_embeddings,
)
from pbd.http.openai.errors import ApiError, from_pbd, invalid, model_not_found
from pbd.http.openai.hub_template import TemplateRaised
from pbd.http.openai.hub_template import find as find_hub_template
from pbd.http.openai.logprobs import (
    LogprobsError,
    TokenLogprob,
    chat_logprobs,
    completion_logprobs,
)
from pbd.http.openai.message_reader import MessageReader
from pbd.http.openai.requests import (
    ChatRequest,
    Options,
    check_object,
    parse_chat,
    parse_completion,
)
from pbd.http.openai.restricted import OpenAIRestrictions
from pbd.http.openai.stops import StopScanner
from pbd.http.openai.structured import Guide
from pbd.http.openai.tool_parsers import CONFIG_PARAMETER, PARSERS
from pbd.http.sse import CONTENT_TYPE, EventStream, event, send_events
from pbd.http.status import finish_failed
from pbd.inference_plane import ModelPlane
from pbd.responses import BacklogFull, StreamResult
from pbd.tracing.request import RequestTrace
from pbd.types import IndexEntry, InferRequest

if TYPE_CHECKING:
    from pbd.modelconfig.model import ModelConfig

log = logging.getLogger("pbd.http.openai")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Index = Callable[[str, bool], list[IndexEntry]]  # the repository's index (ControlPlane's)
DONE = b"data: [DONE]\n\n"
CONVENTION = (
    ": pbd's OpenAI API serves models with a BYTES input 'text_input' and a BYTES output "
    "'text_output'"
)
EMBEDDING_CONVENTION = (
    ": pbd's OpenAI API embeds with models that have a BYTES input 'text_input' and an FP32 "
    "output 'embedding'"
)


def add_routes(
    app: web.Application,
    plane: ModelPlane,
    stream_buffer_bytes: int,
    api_keys: Sequence[str] = (),
    index: Index | None = None,
    elsewhere: Elsewhere | None = None,
    restricted: Sequence[str] = (),
) -> None:
    """The routes over ``plane``. The daemon's app has them all (``index``: the repository,
    for ``GET /v1/models``); a front end's has the POST routes, for the models it runs itself,
    and passes the rest to the daemon (``elsewhere``), so the key and the restrictions
    (``--openai-restricted-api``) are checked in every setup."""
    api = OpenAIApi(plane, stream_buffer_bytes, index)
    guard = _Guard(ApiKeys(api_keys), OpenAIRestrictions.parse(list(restricted)))

    def post(path: str, handler: Handler) -> None:
        route = _answering_errors(handler, guard)
        if elsewhere is not None:
            route = elsewhere.unless_here(route, body_target)
        app.router.add_post(path, route)

    if index is not None:
        app.router.add_get("/v1/models", _answering_errors(api.models, guard))
        app.router.add_get("/v1/models/{model}", _answering_errors(api.model, guard))
    post("/v1/completions", api.completions)
    post("/v1/chat/completions", api.chat)
    post("/v1/embeddings", api.embeddings)


@dataclasses.dataclass(frozen=True)
class _Guard:
    """What a request must show before anything else: a restricted group's header, then a key."""

    keys: ApiKeys
    restrictions: OpenAIRestrictions

    def check(self, request: web.Request) -> None:
        self.restrictions.check(request.method, request.path, request.headers)
        self.keys.check(request.headers.get("Authorization"))


def _answering_errors(handler: Handler, guard: _Guard) -> Handler:
    """Errors as OpenAI's error objects (the HTTP binding's own are Triton's); a request
    without a restricted group's header or an accepted key is answered 401 before anything
    else."""

    async def answer(request: web.Request) -> web.StreamResponse:
        try:
            guard.check(request)
            return await handler(request)
        except PbdError as exc:
            error = from_pbd(exc)
        except ApiError as exc:
            error = exc
        response = web.json_response(error.body(), status=error.status)
        if error.status == 401 and error.code == "invalid_api_key":
            response.headers["WWW-Authenticate"] = "Bearer"
        return response

    return answer


@dataclasses.dataclass(frozen=True)
class _Asked:
    """What one answer is about."""

    request: web.Request
    began: int  # ns, when the HTTP request came
    config: ModelConfig
    header: Header
    prompts: list[str]
    options: Options
    echo: list[str] = field(default_factory=list)  # the prompts, when they are echoed
    reader: Callable[[], MessageReader] | None = None  # a chat's: each choice's own

    def new_reader(self) -> MessageReader:
        return self.reader() if self.reader is not None else MessageReader(self.config.name)

    def logprobs(self, choice: _Choice, start: int) -> dict[str, Any] | None:
        """The choice's tokens from ``start`` on in the answer's shape; None when the
        request did not ask for them."""
        if self.options.logprobs is None:
            return None
        tokens = choice.logprobs[start:]
        if self.header.chat:
            return chat_logprobs(tokens)
        offset = len(self.echoed(choice.prompt)) + sum(
            len(t.token) for t in choice.logprobs[:start]
        )
        return completion_logprobs(tokens, offset)

    def echoed(self, prompt: int) -> str:
        return self.echo[prompt] if self.echo else ""


@dataclasses.dataclass
class _Choice:
    """One choice: one request of the model, and what its responses said so far."""

    index: int
    prompt: int  # which prompt it answers
    request: InferRequest
    trace: RequestTrace | None
    scanner: StopScanner
    max_tokens: int | None
    reader: MessageReader
    items: AsyncGenerator[StreamResult, None] | None = None
    first: StreamResult | None = None
    text: list[str] = field(default_factory=list)
    input_tokens: int | None = None
    output_tokens: int | None = None
    calls: bool = False  # tool calls were read from its text
    logprobs: list[TokenLogprob] = field(default_factory=list)
    logprobs_sent: int = 0  # how many of them a stream has sent

    @property
    def finish_reason(self) -> str:
        if self.calls:
            return "tool_calls"
        if self.scanner.stopped:
            return "stop"
        limit = self.max_tokens
        done = self.output_tokens
        return "length" if limit is not None and done is not None and done >= limit else "stop"


class OpenAIApi:
    def __init__(
        self, plane: ModelPlane, stream_buffer_bytes: int, index: Index | None = None
    ) -> None:
        self.plane = plane
        self.index = index  # the repository's models (the daemon's; a front end has none)
        self.stream_buffer_bytes = stream_buffer_bytes
        self.created = int(time.time())

    # -- models --------------------------------------------------------------------------------

    async def models(self, request: web.Request) -> web.Response:
        assert self.index is not None, "GET /v1/models is the daemon's route"
        names = sorted({entry.name for entry in self.index("", True)})
        served = []
        for name in names:
            try:
                config = self.plane.model_config(name, "")
            except PbdError:
                continue  # unloaded meanwhile
            if _served(config):
                served.append(model_object(name, self.created))
        return web.json_response({"object": "list", "data": served})

    async def model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        self._config(name, _served)
        return web.json_response(model_object(name, self.created))

    def _config(
        self,
        model: str,
        serves: Callable[[ModelConfig], bool] = follows_convention,
        why: str = CONVENTION,
    ) -> ModelConfig:
        try:
            config = self.plane.model_config(model, "")
        except PbdError as exc:
            if exc.code is Code.NOT_FOUND:
                raise model_not_found(model) from None
            raise
        if not serves(config):
            raise model_not_found(model, why)
        return config

    # -- completions ---------------------------------------------------------------------------

    async def completions(self, request: web.Request) -> web.StreamResponse:
        began = time.time_ns()
        parsed = parse_completion(await _body(request))
        config = self._config(parsed.options.model)
        header = Header(f"cmpl-{uuid.uuid4().hex}", int(time.time()), config.name, chat=False)
        echo = list(parsed.prompts) if parsed.echo else []
        asked = _Asked(request, began, config, header, list(parsed.prompts), parsed.options, echo)
        return await self._answer(asked)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        began = time.time_ns()
        parsed = parse_chat(await _body(request))
        config = self._config(parsed.options.model)
        reader = self._reader(config, parsed)
        tools = list(parsed.tools.tools) if parsed.tools is not None else None
        try:
            hub = find_hub_template(self.plane.model_directories(config.name, ""))
            if hub is not None:
                prompt = hub.render(parsed.documents, tools, parsed.template_kwargs)
            else:
                prompt = ChatTemplate.from_parameters(config.parameters).render(parsed.messages)
        except TemplateRaised as exc:  # the template's own raise_exception: the request's
            raise invalid(f"the chat template of model '{config.name}': {exc}") from None
        except TemplateError as exc:
            raise ApiError(
                500, f"the chat template of model '{config.name}': {exc}", type="server_error"
            ) from None
        header = Header(f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), config.name, chat=True)
        options = parsed.options
        guide = self._guide(config, parsed)
        if guide is not None:
            options = dataclasses.replace(
                options, sampling=dataclasses.replace(options.sampling, guide=guide)
            )
        asked = _Asked(request, began, config, header, [prompt], options, reader=reader)
        return await self._answer(asked)

    @staticmethod
    def _reader(config: ModelConfig, parsed: ChatRequest) -> Callable[[], MessageReader]:
        """How each choice's message is read from its text (checking the model can serve
        the request's tools first)."""
        tools, name = parsed.tools, config.name
        if tools is None or tools.choice == "none":
            guide = parsed.response_format
            return lambda: MessageReader(name, guide=guide)
        if tools.forced:
            return lambda: MessageReader(name, forced=tools)
        known = ", ".join(PARSERS)
        parser_name = config.parameters.get(CONFIG_PARAMETER)
        if parser_name is None:
            raise invalid(
                f"model '{name}' has no tool-call parser, so 'tools' with tool_choice 'auto' "
                f"cannot be served: set the config.pbtxt parameter '{CONFIG_PARAMETER}' (one "
                f"of {known})",
                "tools",
            )
        parser = PARSERS.get(parser_name)
        if parser is None:
            raise invalid(
                f"model '{name}' cannot serve 'tools': its config.pbtxt parameter "
                f"'{CONFIG_PARAMETER}' is '{parser_name}', which is not one of {known}",
                "tools",
            )
        return lambda: MessageReader(name, parser=parser)

    @staticmethod
    def _guide(config: ModelConfig, parsed: ChatRequest) -> Guide | None:
        """The structured output the model is asked for, if it can be asked."""
        tools = parsed.tools
        if tools is not None and tools.forced:
            guide: Guide | None = Guide(tools.schema(), strict=True)
            param = "tool_choice"
        else:
            guide, param = parsed.response_format, "response_format"
        if guide is not None and not takes_guide(config):
            raise invalid(
                f"model '{config.name}' cannot be asked for structured output ('{param}'): it "
                "has neither a 'sampling_parameters' input (vLLM's guided_decoding) nor a "
                "'guided_decoding_guide_type' input (TensorRT-LLM's)",
                param,
            )
        return guide

    # -- embeddings ----------------------------------------------------------------------------

    async def embeddings(self, request: web.Request) -> web.Response:
        began = time.time_ns()
        asked = parse_embeddings(await _body(request))
        config = self._config(asked.model, embeds, EMBEDDING_CONVENTION)
        infer = build_embedding_request(config, asked, f"embd-{uuid.uuid4().hex}")
        trace = self.plane.start_trace(
            infer, "/v1/embeddings", began, lambda: request.headers.get("traceparent"), "http"
        )
        if trace is not None:
            infer.trace = trace
        answer: dict[str, Any] | None = None
        try:
            async with contextlib.aclosing(self.plane.infer_stream(infer)) as items:
                async for item in items:
                    if item.error is not None:
                        raise item.error
                    if item.result is not None and answer is None:
                        with item.result as result:
                            vectors, tokens = read_embeddings(result, config.name, len(asked.texts))
                        answer = embeddings_answer(config.name, vectors, asked.encoding, tokens)
                    elif item.result is not None:  # a response past the first: let it go
                        item.result.release()
            if answer is None:
                raise ApiError(
                    500,
                    f"model '{config.name}' sent no response to an embedding request",
                    type="server_error",
                )
        except BaseException as exc:
            if trace is not None:
                finish_failed(trace, exc)
            raise
        if trace is not None:
            trace.finish(200)
        response = web.json_response(answer)
        compress(request, response)
        return response

    # -- running the choices -------------------------------------------------------------------

    async def _answer(self, asked: _Asked) -> web.StreamResponse:
        choices = self._choices(asked)
        try:
            await self._start(choices)
            if not asked.options.stream:
                await self._run(choices, None)
                whole = [self._whole(asked, c) for c in choices]
                response = web.json_response(asked.header.whole(whole, _usage(choices)))
                compress(asked.request, response)
                return response
            return await self._stream(asked, choices)
        except BaseException as exc:
            for choice in choices:
                _finish(choice, exc)
            raise
        finally:
            for choice in choices:
                if choice.items is not None:
                    await choice.items.aclose()

    @staticmethod
    def _whole(asked: _Asked, choice: _Choice) -> Choice:
        text = asked.echoed(choice.prompt) + choice.reader.feed("".join(choice.text))
        message = choice.reader.finish()
        choice.calls = bool(message.calls)
        text += message.content or ""
        content = text if text or not message.calls else None
        logprobs = asked.logprobs(choice, 0)
        return Choice(choice.index, content, choice.finish_reason, message.calls, logprobs)

    def _choices(self, asked: _Asked) -> list[_Choice]:
        options, header = asked.options, asked.header
        if options.logprobs is not None and not returns_logprobs(asked.config):
            raise invalid(
                f"model '{asked.config.name}' does not return logprobs (it has no BYTES output "
                "'logprobs')",
                "logprobs",
            )
        sampling = options.sampling
        stops = () if takes_stop(asked.config) else sampling.stop
        resource = asked.request.match_info.route.resource
        route = resource.canonical if resource is not None else asked.request.path
        count = len(asked.prompts) * options.n
        built = []  # every request first: one that cannot be built fails them all
        for p, prompt in enumerate(asked.prompts):
            for i in range(options.n):
                index = p * options.n + i
                seed = None if sampling.seed is None else sampling.seed + i
                own = dataclasses.replace(sampling, seed=seed)
                request_id = header.id if count == 1 else f"{header.id}-{index}"
                infer = build_request(asked.config, prompt, own, options.stream, request_id)
                built.append((index, p, infer))
        choices = []
        for index, p, infer in built:
            trace = self.plane.start_trace(
                infer, route, asked.began, lambda: asked.request.headers.get("traceparent"), "http"
            )
            if trace is not None:  # else the plane keeps what it needs on the request
                infer.trace = trace
            choices.append(
                _Choice(
                    index,
                    p,
                    infer,
                    trace,
                    StopScanner(stops),
                    sampling.max_tokens,
                    asked.new_reader(),
                )
            )
        return choices

    async def _start(self, choices: list[_Choice]) -> None:
        """Send every request and wait for its first response: a request that cannot start
        fails the whole answer before anything is sent."""
        for choice in choices:
            choice.items = self.plane.infer_stream(choice.request)
        firsts = await asyncio.gather(
            *(anext(c.items, StreamResult(final=True)) for c in choices if c.items is not None),
            return_exceptions=True,
        )
        for choice, first in zip(choices, firsts, strict=True):
            if isinstance(first, BaseException):
                raise first
            choice.first = first

    async def _run(
        self, choices: list[_Choice], on_text: Callable[[_Choice, str], None] | None
    ) -> None:
        """Read every choice's responses to the end (``on_text``: each piece of text as it
        comes; else it is kept in the choice). The first error stops them all and is raised."""
        try:
            async with asyncio.TaskGroup() as group:
                for choice in choices:
                    group.create_task(self._read(choice, on_text))
        except BaseExceptionGroup as group_error:
            raise _first(group_error) from None

    async def _read(self, choice: _Choice, on_text: Callable[[_Choice, str], None] | None) -> None:
        assert choice.items is not None and choice.first is not None
        try:
            async with contextlib.aclosing(choice.items) as items:
                item: StreamResult | None = choice.first
                while item is not None:
                    if self._take(choice, item, on_text):
                        break  # a stop sequence: leaving cancels the rest of the request
                    item = await anext(items, None)
            tail = choice.scanner.finish()
            if tail:
                self._text(choice, tail, on_text)
        except BaseException as exc:
            _finish(choice, exc)
            raise
        _finish(choice, None)

    def _take(
        self,
        choice: _Choice,
        item: StreamResult,
        on_text: Callable[[_Choice, str], None] | None,
    ) -> bool:
        """One response into ``choice``; True once a stop sequence ended its text."""
        if item.error is not None:
            raise item.error
        if item.result is None:
            return False
        replying = time.time_ns()
        with item.result as result:
            try:
                piece = read_response(result)
            except LogprobsError as exc:
                model = choice.request.model_name
                raise ApiError(500, f"model '{model}': {exc}", type="server_error") from None
        if piece.logprobs:
            choice.logprobs.extend(piece.logprobs)
        if piece.input_tokens is not None and choice.input_tokens is None:
            choice.input_tokens = piece.input_tokens
        if piece.output_tokens is not None:
            choice.output_tokens = (choice.output_tokens or 0) + piece.output_tokens
        text = choice.scanner.feed(piece.text)
        if text:
            self._text(choice, text, on_text)
        if choice.trace is not None:
            choice.trace.responded(replying)
        return choice.scanner.stopped

    @staticmethod
    def _text(choice: _Choice, text: str, on_text: Callable[[_Choice, str], None] | None) -> None:
        if on_text is None:
            choice.text.append(text)
        else:
            on_text(choice, text)

    # -- streaming -----------------------------------------------------------------------------

    async def _stream(self, asked: _Asked, choices: list[_Choice]) -> web.StreamResponse:
        header = asked.header
        response = web.StreamResponse(status=200, headers={"Content-Type": CONTENT_TYPE})
        await response.prepare(asked.request)
        with_usage = asked.options.include_usage

        async def produce(events: EventStream) -> None:
            def put(doc: dict[str, Any]) -> None:
                events.put(event(encode(doc)))

            try:
                for choice in choices:
                    if header.chat:
                        put(header.chunk(choice.index, "", None, first=True, with_usage=with_usage))
                    elif asked.echo:
                        echoed = asked.echoed(choice.prompt)
                        put(header.chunk(choice.index, echoed, None, with_usage=with_usage))

                def content(choice: _Choice, text: str) -> None:
                    if text:
                        logprobs = pending(choice)
                        put(header.chunk(choice.index, text, None, with_usage, logprobs))

                def pending(choice: _Choice) -> dict[str, Any] | None:
                    """The tokens not sent yet, to go with the next chunk."""
                    start, choice.logprobs_sent = choice.logprobs_sent, len(choice.logprobs)
                    return asked.logprobs(choice, start) if start < len(choice.logprobs) else None

                await self._run(choices, lambda c, text: content(c, c.reader.feed(text)))
                for choice in choices:
                    message = choice.reader.finish()
                    content(choice, message.content or "")
                    for position, call in enumerate(message.calls):
                        put(header.tool_call_chunk(choice.index, position, call, with_usage))
                    choice.calls = bool(message.calls)
                    reason, logprobs = choice.finish_reason, pending(choice)
                    put(header.chunk(choice.index, "", reason, with_usage, logprobs))
                usage = _usage(choices)
                if with_usage and usage is not None:
                    put(header.usage_chunk(usage))
                events.end(DONE)
            except BacklogFull as exc:
                log.warning("a stream of model '%s': %s", header.model, exc)
                events.end(event(encode(ApiError(500, str(exc), type="server_error").body())))
            except PbdError as exc:
                events.end(event(encode(from_pbd(exc).body())))
            except ApiError as exc:  # the model's text is not what was asked for
                events.end(event(encode(exc.body())))

        await send_events(response, EventStream(self.stream_buffer_bytes), produce)
        await response.write_eof()
        return response


def _served(config: ModelConfig) -> bool:
    """Whether any /v1 route serves the model (it is listed)."""
    return follows_convention(config) or embeds(config)


def _finish(choice: _Choice, error: BaseException | None) -> None:
    """End the choice's trace (once)."""
    trace, choice.trace = choice.trace, None
    if trace is None:
        return
    if error is None:
        trace.finish(200)
    else:
        finish_failed(trace, error)


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The error to answer with, of those a group of choices failed with."""
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            return _first(error)
        return error
    return group


def _usage(choices: list[_Choice]) -> Usage | None:
    """Prompt tokens once per prompt, completion tokens of every choice; None when the model
    reported none."""
    if all(c.input_tokens is None and c.output_tokens is None for c in choices):
        return None
    prompts: dict[int, int] = {}
    for choice in choices:
        if choice.input_tokens is not None:
            prompts.setdefault(choice.prompt, choice.input_tokens)
    completion = sum(c.output_tokens or 0 for c in choices)
    return Usage(sum(prompts.values()), completion)


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise invalid(f"the request body is not valid JSON: {exc}") from None
    return dict(check_object(doc))
