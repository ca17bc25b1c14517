"""The worker's side of auto-complete: import model.py, call the static method, answer JSON."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pbd_wire import worker_pb2 as wpb
from pbd_worker.lifecycle import auto_complete

CONFIG = {"name": "m", "max_batch_size": 0, "input": [], "output": []}


@pytest.fixture
def model_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "m"
    (directory / "1").mkdir(parents=True)
    yield directory
    # load_model_class imports the file as module "1.model": let the next test import its own.
    for name in [n for n in sys.modules if n == "1" or n.startswith("1.")]:
        del sys.modules[name]
    for path in (str(directory / "1"), str(directory)):
        while path in sys.path:
            sys.path.remove(path)


def run(model_dir: Path, source: str) -> wpb.AutoCompleted:
    model = model_dir / "1" / "model.py"
    model.write_text(source)
    message = wpb.AutoComplete(
        model_path=str(model),
        model_dir=str(model_dir),
        version="1",
        config_json=json.dumps(CONFIG),
    )
    return auto_complete(message)


HEADER = "import triton_python_backend_utils as pb_utils\n\nclass TritonPythonModel:\n"
EXECUTE = "    def execute(self, requests):\n        return []\n"


def test_the_completed_config_comes_back(model_dir: Path) -> None:
    reply = run(
        model_dir,
        HEADER
        + "    @staticmethod\n    def auto_complete_config(c):\n"
        + "        c.set_max_batch_size(2)\n"
        + "        c.add_input({'name': 'A', 'data_type': 'TYPE_FP32', 'dims': [1]})\n"
        + "        return c\n"
        + EXECUTE,
    )
    assert not reply.HasField("error")
    completed = json.loads(reply.config_json)
    assert completed["max_batch_size"] == 2
    assert completed["input"] == [{"name": "A", "data_type": "TYPE_FP32", "dims": [1]}]


def test_a_model_without_the_hook_gets_its_config_back(model_dir: Path) -> None:
    reply = run(model_dir, HEADER + EXECUTE)
    assert json.loads(reply.config_json) == CONFIG


def test_returning_something_else_is_tritons_error(model_dir: Path) -> None:
    reply = run(
        model_dir,
        HEADER
        + "    @staticmethod\n    def auto_complete_config(c):\n        return {}\n"
        + EXECUTE,
    )
    assert reply.error.message == (
        "auto_complete_config function in model 'm' must return a valid pb.ModelConfig object."
    )


def test_a_conflict_is_reported_with_its_message(model_dir: Path) -> None:
    reply = run(
        model_dir,
        HEADER
        + "    @staticmethod\n    def auto_complete_config(c):\n"
        + "        c.set_dynamic_batching()\n"
        + "        c.add_input({'name': 'A'})\n        return c\n"
        + EXECUTE,
    )
    assert reply.error.code == "INVALID_ARG"
    assert reply.error.message == (
        "input 'A' in auto-complete-config function for model 'm' is missing 'data_type' property."
    )
    assert "Traceback" in reply.error.traceback


def test_an_import_error_is_reported(model_dir: Path) -> None:
    reply = run(model_dir, "import not_a_module_anywhere\n")
    assert "ModuleNotFoundError" in reply.error.message
