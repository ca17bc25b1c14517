"""A model's own Jinja chat template, as models on the Hub ship it, rendered as Hugging Face's
tokenizers render it (``apply_chat_template``).

Where it is found: the version directory, then the model directory (beside
``config.pbtxt``): ``chat_template.jinja``, else ``tokenizer_config.json``'s
``chat_template`` (a string, or a list of ``{"name", "template"}`` of which ``default`` is
taken). A model with neither uses its config's template (:mod:`pbd.http.openai.chat_template`).

How it renders: Jinja2's immutable sandbox (a template cannot reach Python objects' internals
or change what it is given), ``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols``
extension; the globals ``raise_exception(message)`` (an error naming the template's words)
and ``strftime_now(format)``; the ``tojson`` filter that keeps non-ASCII text and takes
``indent``; the variables ``messages``, ``add_generation_prompt`` (true), ``tools`` (or
none), the special tokens of ``tokenizer_config.json`` (``bos_token``, ``eos_token``,
``unk_token``, ``pad_token``) and a request's ``chat_template_kwargs``. Nothing is fetched.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from pbd.http.openai.chat_template import TemplateError

JINJA_FILE = "chat_template.jinja"
TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token")


class TemplateRaised(ValueError):
    """The template's own ``raise_exception``: the request does not fit the template."""


def _raise_exception(message: str) -> None:
    raise TemplateRaised(message)


def _strftime_now(format: str) -> str:  # noqa: A002 - the templates' name for it
    return datetime.now().strftime(format)


def _tojson(value: Any, indent: int | None = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=sort_keys)


@functools.cache
def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


@functools.lru_cache(maxsize=64)
def _compiled(source: str) -> jinja2.Template:
    return _environment().from_string(source)


@dataclass(frozen=True)
class HubTemplate:
    source: str
    special: Mapping[str, str]  # bos_token etc., as the tokenizer's config names them
    where: str  # the file, for messages

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        kwargs: Mapping[str, Any] | None = None,
    ) -> str:
        """The prompt; TemplateError when the template itself is broken, TemplateRaised
        when it refuses the request."""
        try:
            template = _compiled(self.source)
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(f"{self.where}: line {exc.lineno}: {exc.message}") from None
        values: dict[str, Any] = {
            **self.special,
            **(kwargs or {}),
            "messages": [dict(m) for m in messages],
            "tools": [dict(t) for t in tools] if tools else None,
        }
        values.setdefault("add_generation_prompt", True)
        try:
            return template.render(**values)
        except TemplateRaised:
            raise
        except jinja2.TemplateError as exc:
            raise TemplateError(f"{self.where}: {exc}") from None


def find(directories: Sequence[Path]) -> HubTemplate | None:
    """The template the first of ``directories`` that has one ships, with the special tokens
    of the first ``tokenizer_config.json``; None when none has a template. Files are read
    again only when they change."""
    source: tuple[str, str] | None = None  # (template, where)
    special: dict[str, str] | None = None
    for directory in directories:
        jinja = _read(directory / JINJA_FILE)
        config = _read(directory / TOKENIZER_CONFIG)
        if source is None and jinja is not None:
            source = (jinja, str(directory / JINJA_FILE))
        if config is None:
            continue
        doc = _config(config, directory / TOKENIZER_CONFIG)
        if special is None:
            special = {k: t for k in SPECIAL_TOKENS if (t := _token(doc.get(k))) is not None}
        template = doc.get("chat_template")
        if isinstance(template, list):  # named templates: the default one
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        if source is None and isinstance(template, str):
            source = (template, f"{directory / TOKENIZER_CONFIG} (chat_template)")
    if source is None:
        return None
    return HubTemplate(source[0], special or {}, source[1])


def _read(path: Path) -> str | None:
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return None
    return _text(path, stamp)


@functools.lru_cache(maxsize=64)
def _text(path: Path, stamp: int) -> str:
    """``stamp``: the file's mtime, so a changed file is read anew."""
    del stamp
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TemplateError(f"{path}: {exc}") from None


def _config(text: str, path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise TemplateError(f"{path}: {exc}") from None
    return doc if isinstance(doc, dict) else {}


def _token(value: Any) -> str | None:
    """A special token as tokenizer_config.json gives it: a string, or an object with its
    ``content``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None
