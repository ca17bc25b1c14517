"""Shared samples for the model-config tests."""

from __future__ import annotations

from pbd.modelconfig.model import ModelConfig
from pbd.modelconfig.parse import parse_model_config

SRC = "repo/m/config.pbtxt"

# The add_sub example of Triton's python_backend README.
ADD_SUB = """
name: "add_sub"
backend: "python"

input [
  {
    name: "INPUT0"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }
]
input [
  {
    name: "INPUT1"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }
]
output [
  {
    name: "OUTPUT1"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }
]

instance_group [{ kind: KIND_CPU }]
"""


def parse(text: str, name: str = "m") -> ModelConfig:
    return parse_model_config(text, model_name=name, source=SRC)


def tensor(dims: str, extra: str = "", *, batch: int = 0, kind: str = "input") -> str:
    return (
        f"max_batch_size: {batch}\n"
        f'{kind} [ {{ name: "T" data_type: TYPE_FP32 dims: {dims} {extra} }} ]'
    )
