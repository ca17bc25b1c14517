"""Which model names load, for every load (startup, poll, RepositoryModelLoad, BLS, upload).

A name is one directory name in the repository: never empty, ``.``, ``..``, nor holding ``/``
or NUL (it would leave the repository). As Triton 2.73 documents (its python backend refuses
them when it starts a model's stub), a name also may not hold whitespace, control characters
or any of ``;|&$`<>()[]{}\\"'*?~#!``; hyphens, underscores, dots and digits are fine.
"""

from __future__ import annotations

from pbd.errors import invalid_arg

FORBIDDEN = frozenset(";|&$`<>()[]{}\\\"'*?~#!")
# Triton's words for a forbidden character (python_backend's stub launcher).
TRITON_MESSAGE = "Invalid stub name: contains invalid characters"


def check_model_name(name: str) -> None:
    """Raise INVALID_ARGUMENT for a name no model may have."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise invalid_arg(f"invalid model name '{name}'")
    if any(c in FORBIDDEN or c.isspace() or not c.isprintable() for c in name):
        raise invalid_arg(
            f"failed to load '{name}': {TRITON_MESSAGE} (a model name may not contain "
            "whitespace, control characters or any of ;|&$`<>()[]{}\\\"'*?~#!)"
        )
