"""Chat messages rendered into one prompt: the default (ChatML), a model's own template, and
templates that are refused."""

from __future__ import annotations

import pytest

from pbd.http.openai.chat_template import ChatTemplate, Message, TemplateError, fill

CHAT = [Message("system", "Be brief."), Message("user", "Hi {there}"), Message("assistant", "Yo")]


def test_the_default_is_chatml_with_the_generation_prompt() -> None:
    assert ChatTemplate.from_parameters({}).render(CHAT) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi {there}<|im_end|>\n"  # content is copied, never interpreted
        "<|im_start|>assistant\nYo<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_a_models_parameters_set_begin_each_role_and_the_generation_prompt() -> None:
    template = ChatTemplate.from_parameters(
        {
            "chat_template.begin": "<s>",
            "chat_template.message": "[{role}] {content}\n",
            "chat_template.system": "",  # system messages dropped
            "chat_template.user": "Q: {content}\n",
            "chat_template.generation": "A:",
            "unrelated": "{nope}",
        }
    )
    assert template.render(CHAT) == "<s>Q: Hi {there}\n[assistant] Yo\nA:"


def test_braces_are_written_doubled() -> None:
    assert fill("{{x}} {role}}}", {"role": "r"}, "w") == "{x} r}"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{name}", "unknown placeholder '{name}'"),
        ("{role", "unknown placeholder '{role'"),
        ("a } b", "a lone '}' at offset 2"),
    ],
)
def test_a_bad_template_is_refused_naming_its_parameter(text: str, words: str) -> None:
    with pytest.raises(TemplateError) as info:
        ChatTemplate.from_parameters({"chat_template.user": text})
    assert str(info.value).startswith("chat_template.user: ")
    assert words in str(info.value)
