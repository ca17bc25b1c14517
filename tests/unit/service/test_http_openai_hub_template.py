"""A model's own Jinja chat template, rendered as Hugging Face's ``apply_chat_template`` renders
it: each template (ChatML, Llama 3, Mistral shapes, written here) is rendered by pbd and by
transformers on a tokenizer built in the test (no download), and the prompts must be equal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pbd.http.openai.chat_template import TemplateError
from pbd.http.openai.hub_template import TemplateRaised, find

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
LLAMA3 = """{{- bos_token }}
{%- if tools is not none %}
{{- '<|start_header_id|>system<|end_header_id|>\n\nTools:\n' }}
{%- for t in tools %}
{{- t | tojson(indent=4) }}
{{- '\n' }}
{%- endfor %}
{{- '<|eot_id|>' }}
{%- endif %}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}
    {{- message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""
MISTRAL = """{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('Conversation roles must alternate user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\n\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token}}
    {%- endif %}
{%- endfor %}
{%- if thinking is defined %}{{ '[THINK]' }}{% endif %}
"""
CHAT = [
    {"role": "system", "content": "Be brief. Ünïcode ☃"},
    {"role": "user", "content": "  hello  "},
    {"role": "assistant", "content": "hi"},
    {"role": "user", "content": "what's 2+2?"},
]
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]


def _tokenizer(template: str) -> Any:
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    model = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=model, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    tokenizer.chat_template = template
    return tokenizer


def _model_dir(tmp_path: Path, template: str) -> Path:
    config = {
        "chat_template": template,
        "bos_token": "<s>",
        "eos_token": {"content": "</s>", "lstrip": False},
        "unk_token": "<unk>",
    }
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp_path


@pytest.mark.parametrize("template", [CHATML, LLAMA3, MISTRAL], ids=["chatml", "llama3", "mistral"])
@pytest.mark.parametrize("generation", [True, False])
def test_rendered_as_transformers_renders_it(
    tmp_path: Path, template: str, generation: bool
) -> None:
    found = find([tmp_path / "1", _model_dir(tmp_path, template)])
    assert found is not None
    ours = found.render(CHAT, None, {"add_generation_prompt": generation})
    theirs = _tokenizer(template).apply_chat_template(
        CHAT, tokenize=False, add_generation_prompt=generation
    )
    assert ours == theirs


def test_tools_and_template_kwargs_as_transformers(tmp_path: Path) -> None:
    found = find([_model_dir(tmp_path, LLAMA3)])
    assert found is not None
    ours = found.render(CHAT, TOOLS, {"add_generation_prompt": True})
    theirs = _tokenizer(LLAMA3).apply_chat_template(
        CHAT, tools=TOOLS, tokenize=False, add_generation_prompt=True
    )
    assert ours == theirs and '"name": "add"' in ours
    found = find([_model_dir(tmp_path, MISTRAL)])
    assert found is not None
    assert found.render(CHAT, None, {"thinking": True}).endswith("[THINK]")


def test_the_jinja_file_wins_and_the_version_directory_first(tmp_path: Path) -> None:
    model = _model_dir(tmp_path, CHATML)
    version = model / "1"
    version.mkdir()
    (model / "chat_template.jinja").write_text("{{ bos_token }}model")
    assert find([version, model]).render(CHAT) == "<s>model"  # type: ignore[union-attr]
    (version / "chat_template.jinja").write_text("version{{ eos_token }}")
    assert find([version, model]).render(CHAT) == "version</s>"  # type: ignore[union-attr]
    assert find([tmp_path / "none"]) is None


def test_a_refusal_of_the_template_and_a_broken_one(tmp_path: Path) -> None:
    found = find([_model_dir(tmp_path, MISTRAL)])
    assert found is not None
    with pytest.raises(TemplateRaised, match="must alternate"):
        found.render([{"role": "assistant", "content": "x"}])
    (tmp_path / "b").mkdir()
    broken = find([_model_dir(tmp_path / "b", "{% for %}")])
    assert broken is not None
    with pytest.raises(TemplateError, match="tokenizer_config.json"):
        broken.render(CHAT)


def test_the_sandbox_keeps_python_out(tmp_path: Path) -> None:
    escape = "{{ messages.__class__.__mro__[1].__subclasses__() }}"
    found = find([_model_dir(tmp_path, escape)])
    assert found is not None
    with pytest.raises(TemplateError):
        found.render(CHAT)
