"""The README's first steps: what scripts/serve.sh installs runs the example clients that the
README's "Try it" block suggests next."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _distribution(requirement: str) -> str:
    return re.split(r"[\[<>=~!; ]", requirement, maxsplit=1)[0].lower()


def test_serve_installs_what_the_example_clients_import() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = re.search(
        r"scripts/bootstrap\.sh\"?[ \t]*(\S*)", (ROOT / "scripts/serve.sh").read_text()
    )
    assert found, "serve.sh does not run bootstrap.sh"
    extras = [e for e in found.group(1).split(",") if e]
    installed = {_distribution(r) for r in project["dependencies"]}
    for extra in extras:
        installed |= {_distribution(r) for r in project["optional-dependencies"][extra]}
    readme = (ROOT / "README.md").read_text()
    try_it = readme[readme.index("## Try it") : readme.index("## Running it")]
    clients = re.findall(r"\.venv/bin/python (examples/\S+\.py)", try_it)
    assert clients
    for client in clients:
        tree = ast.parse((ROOT / client).read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top in installed, (client, top)


def test_the_docs_commands_run_from_the_venv() -> None:
    """pbd and the example clients are installed in .venv (scripts/bootstrap.sh), not in the
    system Python: a shell block's `python ...`, `python -m pbd` or `pbd ...` would not find
    them."""
    pages = [ROOT / "README.md", ROOT / "examples" / "README.md", *(ROOT / "docs").glob("*.md")]
    bare = []
    for page in pages:
        for block in re.findall(r"```(?:sh|bash)\n(.*?)```", page.read_text(), re.S):
            for line in block.splitlines():
                if re.match(r"\s*(python3?|pip3?|pbd)\s", line):
                    bare.append(f"{page.relative_to(ROOT)}: {line.strip()}")
    assert bare == []
