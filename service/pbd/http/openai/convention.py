"""Which models the OpenAI API serves, and how it talks to them.

The convention is the one Triton's LLM backends (vLLM, TensorRT-LLM) and their OpenAI front end
use, so a model written for them needs no change:

- a BYTES input ``text_input`` (the prompt) and a BYTES output ``text_output`` (the text of
  each response; a decoupled model streams it in pieces, one per response);
- an optional BOOL input ``stream``: set to whether the client streams (a model that has none
  is read the same way: every response's text is appended);
- the sampling options go to the inputs of the same name the model has (``max_tokens``,
  ``temperature``, ``top_p``, ``seed``, ``stop``, ``frequency_penalty``,
  ``presence_penalty``, and vLLM's extra fields such as ``top_k``; ``random_seed`` and
  ``stop_words`` are taken too, TensorRT-LLM's names),
  each converted to the input's datatype, and all of them as one JSON object to a BYTES input
  ``sampling_parameters`` if it has one (vLLM's);
- usage counts: a model reports them with the outputs ``num_input_tokens`` (the prompt's,
  read from the first response that has it) and ``num_output_tokens`` (the tokens in that
  response; summed), INT32/UINT32/INT64 scalars; the BOOL inputs ``return_num_input_tokens``
  and ``return_num_output_tokens`` are set to true when it has them. A model that reports none
  gets answers without ``usage``;
- structured output (a ``response_format``, a forced ``tool_choice``): ``guided_decoding`` in
  ``sampling_parameters`` (vLLM's), and TensorRT-LLM's ``guided_decoding_guide_type`` /
  ``guided_decoding_guide`` inputs (:mod:`pbd.http.openai.structured`);
- log probabilities: a model that reports them declares a BYTES output ``logprobs``
  (:mod:`pbd.http.openai.logprobs`); asked, ``logprobs`` (the alternatives per token) is in
  ``sampling_parameters``;
- a BOOL input ``exclude_input_in_output`` is set to true (the prompt is not part of the
  answer; ``echo`` is pbd's to honour).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pbd.http.generate_json import tensor_from_json
from pbd.http.openai.logprobs import OUTPUT as LOGPROBS_OUTPUT
from pbd.http.openai.logprobs import TokenLogprob, read_logprobs
from pbd.http.openai.requests import Sampling
from pbd.http.openai.structured import GUIDE_TYPE_INPUT
from pbd.http.tensors import wire_to_json
from pbd.types import InferRequest, InferResult, InputTensor

if TYPE_CHECKING:
    from pbd.modelconfig.model import ModelConfig

TEXT_INPUT = "text_input"
TEXT_OUTPUT = "text_output"
STREAM = "stream"
SAMPLING_PARAMETERS = "sampling_parameters"
INPUT_TOKENS = "num_input_tokens"
OUTPUT_TOKENS = "num_output_tokens"
_TRUE_INPUTS = ("return_num_input_tokens", "return_num_output_tokens", "exclude_input_in_output")
# OpenAI's name -> the input names a model may take it as.
SAMPLING_INPUTS: dict[str, tuple[str, ...]] = {
    "max_tokens": ("max_tokens",),
    "temperature": ("temperature",),
    "top_p": ("top_p",),
    "seed": ("seed", "random_seed"),
    "stop": ("stop", "stop_words"),
    "frequency_penalty": ("frequency_penalty",),
    "presence_penalty": ("presence_penalty",),
}


def follows_convention(config: ModelConfig) -> bool:
    text_in, text_out = config.input(TEXT_INPUT), config.output(TEXT_OUTPUT)
    return (
        text_in is not None
        and text_in.datatype == "BYTES"
        and text_out is not None
        and text_out.datatype == "BYTES"
    )


def takes_stop(config: ModelConfig) -> bool:
    """Whether the model applies stop sequences itself (else pbd cuts the text)."""
    names = (*SAMPLING_INPUTS["stop"], SAMPLING_PARAMETERS)
    return any(config.input(name) is not None for name in names)


def takes_guide(config: ModelConfig) -> bool:
    """Whether the model can be asked for structured output (vLLM's or TensorRT-LLM's way)."""
    return any(config.input(name) is not None for name in (SAMPLING_PARAMETERS, GUIDE_TYPE_INPUT))


def returns_logprobs(config: ModelConfig) -> bool:
    output = config.output(LOGPROBS_OUTPUT)
    return output is not None and output.datatype == "BYTES"


def build_request(
    config: ModelConfig, prompt: str, sampling: Sampling, stream: bool, request_id: str
) -> InferRequest:
    """One request of the model for ``prompt`` (the latest version)."""
    values: dict[str, Any] = {TEXT_INPUT: prompt, STREAM: stream}
    values.update(dict.fromkeys(_TRUE_INPUTS, True))
    chosen = sampling.as_dict()
    for key, value in chosen.items():
        for name in SAMPLING_INPUTS.get(key, (key,)):
            values[name] = value
    if chosen:
        values[SAMPLING_PARAMETERS] = json.dumps(chosen)
    if sampling.guide is not None:
        values.update(sampling.guide.inputs())
    batching = config.max_batch_size > 0
    inputs: list[InputTensor] = []
    for name, value in values.items():
        tensor = config.input(name)
        if tensor is not None:
            inputs.append(tensor_from_json(tensor, batching, value))
    return InferRequest(config.name, "", request_id, inputs)


@dataclass(frozen=True)
class Piece:
    """What one response says."""

    text: str
    input_tokens: int | None
    output_tokens: int | None
    logprobs: list[TokenLogprob] | None = None  # its tokens', when the model reports them


def read_response(result: InferResult) -> Piece:
    """What one response says; LogprobsError when its ``logprobs`` output is malformed."""
    text: list[str] = []
    counts: dict[str, int] = {}
    logprobs: list[TokenLogprob] | None = None
    for out in result.outputs:
        if out.name == LOGPROBS_OUTPUT:
            logprobs = read_logprobs(wire_to_json(out))
        elif out.name == TEXT_OUTPUT:
            text.extend(str(v) for v in wire_to_json(out))
        elif out.name in (INPUT_TOKENS, OUTPUT_TOKENS):
            values = wire_to_json(out)
            if values and isinstance(values[0], int | float):
                counts[out.name] = int(values[0])
    return Piece("".join(text), counts.get(INPUT_TOKENS), counts.get(OUTPUT_TOKENS), logprobs)
