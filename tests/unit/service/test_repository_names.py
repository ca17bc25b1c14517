"""Model names Triton 2.73 refuses, for every load."""

from __future__ import annotations

import pytest

from pbd.errors import Code, PbdError
from pbd.repository.names import FORBIDDEN, TRITON_MESSAGE, check_model_name


@pytest.mark.parametrize("char", sorted(FORBIDDEN) + [" ", "\t", "\n", "\x1b", "\u00a0"])
def test_shell_whitespace_and_control_characters_are_refused(char: str) -> None:
    with pytest.raises(PbdError) as info:
        check_model_name(f"model{char}test")
    assert info.value.code is Code.INVALID_ARG
    assert TRITON_MESSAGE in info.value.message


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a\0b"])
def test_names_that_are_no_directory_name(name: str) -> None:
    with pytest.raises(PbdError, match="invalid model name"):
        check_model_name(name)


@pytest.mark.parametrize(
    "name", ["TestModel123", "model-with-hyphens", "model_with_underscores", "v1.2", "modèle"]
)
def test_ordinary_names_load(name: str) -> None:
    check_model_name(name)
