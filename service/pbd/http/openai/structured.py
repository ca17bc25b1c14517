"""Structured output: what a request's ``response_format`` (or a forced ``tool_choice``) asks
of the model, how it is asked, and the check of its answer.

The model is asked as Triton's vLLM model takes it: ``guided_decoding`` in the JSON of
``sampling_parameters`` (``{"json": schema}`` or ``{"json_object": true}``, vLLM's structured
output parameters, which Triton's vLLM backend maps to ``StructuredOutputsParams``), and as
TensorRT-LLM's model takes it: the BYTES inputs ``guided_decoding_guide_type`` (``json``,
``json_schema``) and ``guided_decoding_guide`` (the schema). Whatever the model writes is then
checked, as the model may not honour the guide: ``json_object`` must be a JSON object; a
``json_schema`` must be JSON, and, when ``strict`` is true, valid against the schema.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import jsonschema

from pbd.http.openai.errors import ApiError, invalid

GUIDED_DECODING = "guided_decoding"  # the key in sampling_parameters (vLLM's)
GUIDE_TYPE_INPUT = "guided_decoding_guide_type"  # TensorRT-LLM's inputs
GUIDE_INPUT = "guided_decoding_guide"


@dataclass(frozen=True)
class Guide:
    """JSON the model is to write: any object (``schema`` None), or one of ``schema``."""

    schema: dict[str, Any] | None
    strict: bool = False

    def sampling(self) -> dict[str, Any]:
        """The ``guided_decoding`` value of ``sampling_parameters``."""
        return {"json_object": True} if self.schema is None else {"json": self.schema}

    def inputs(self) -> dict[str, str]:
        """TensorRT-LLM's guide inputs."""
        if self.schema is None:
            return {GUIDE_TYPE_INPUT: "json"}
        return {GUIDE_TYPE_INPUT: "json_schema", GUIDE_INPUT: json.dumps(self.schema)}

    def problem(self, text: str) -> str | None:
        """What is wrong with the model's ``text``; None when it is what was asked."""
        try:
            doc = json.loads(text)
        except ValueError as exc:
            return f"it is not JSON ({exc})"
        if self.schema is None:
            return None if isinstance(doc, dict) else "it is not a JSON object"
        if not self.strict:
            return None
        error = jsonschema.exceptions.best_match(
            jsonschema.validators.validator_for(self.schema)(self.schema).iter_errors(doc)
        )
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path)
        return f"it does not match the schema{f' at {where}' if where else ''}: {error.message}"


def not_conforming(model: str, asked: str, problem: str) -> ApiError:
    return ApiError(
        500,
        f"model '{model}' answered a request for {asked} with text that does not conform: "
        f"{problem}",
        type="server_error",
    )


def parse_response_format(value: Any) -> Guide | None:
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return Guide(None)
    if kind != "json_schema":
        raise invalid(
            "'response_format.type' must be one of text, json_object, json_schema",
            "response_format",
        )
    spec = value.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise invalid(
            "'response_format.json_schema' must be an object with a 'name'",
            "response_format.json_schema",
        )
    schema = spec.get("schema", {})
    strict = spec.get("strict", False)
    if not isinstance(schema, dict):
        raise invalid(
            "'response_format.json_schema.schema' must be a JSON schema object",
            "response_format.json_schema.schema",
        )
    if not isinstance(strict, bool | None):
        raise invalid(
            "'response_format.json_schema.strict' must be a boolean",
            "response_format.json_schema.strict",
        )
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        raise invalid(
            f"'response_format.json_schema.schema' is not a valid JSON schema: {exc.message}",
            "response_format.json_schema.schema",
        ) from None
    return Guide(schema, bool(strict))
