"""``pb_utils.ModelConfig``: what a model's static ``auto_complete_config`` receives and returns.

It wraps the Triton JSON form of the configuration (the dict a model also gets, as a string, in
``args["model_config"]``). A model may only fill in what the configuration left open: the
methods refuse, with Triton's messages, anything that contradicts config.pbtxt. ``as_dict()``
is the live dict, as in Triton, so a model that edits it directly changes the result too.
"""

from __future__ import annotations

import json
from typing import Any

_INPUT_PROPERTIES = ("name", "data_type", "dims", "optional")
_OUTPUT_PROPERTIES = ("name", "data_type", "dims")
_TRANSACTION_PROPERTIES = ("decoupled",)
# A config.pbtxt tensor without a data_type reads as this: the model may set it.
_UNSET_TYPE = "TYPE_INVALID"


class ModelConfig:
    def __init__(self, model_config: str | dict[str, Any]) -> None:
        """``model_config``: the configuration as a JSON string (or an already parsed dict)."""
        config = json.loads(model_config) if isinstance(model_config, str) else model_config
        if not isinstance(config, dict):
            raise ValueError("the model configuration must be a JSON object")
        config.setdefault("name", "")
        config.setdefault("max_batch_size", 0)
        config.setdefault("input", [])
        config.setdefault("output", [])
        self._model_config: dict[str, Any] = config

    @property
    def _name(self) -> str:
        return str(self._model_config["name"])

    def as_dict(self) -> dict[str, Any]:
        return self._model_config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        """Raise the batch size; lowering one config.pbtxt set is a conflict."""
        configured = self._model_config["max_batch_size"]
        if configured > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {configured}, but in "
                f"auto-complete-config function for model '{self._name}' specified "
                f"max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        """Schedule with the dynamic batcher, unless another scheduler is configured."""
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{other}', but "
                    f"auto-complete-config function for model '{self._name}' tries to set "
                    "scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        for key in transaction_policy_dict:
            if key not in _TRANSACTION_PROPERTIES:
                raise ValueError(
                    "model transaction property in auto-complete-config function for model "
                    f"'{self._name}' contains property other than 'decoupled'"
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" not in transaction_policy_dict:
            return
        wanted = transaction_policy_dict["decoupled"]
        if "decoupled" in policy and policy["decoupled"] != wanted:
            raise ValueError(
                "trying to change decoupled property in auto-complete-config for model "
                f"'{self._name}', which is already set to '{policy['decoupled']}'"
            )
        policy["decoupled"] = wanted

    def add_input(self, input: dict[str, Any]) -> None:  # noqa: A002 - Triton's parameter name
        self._add_tensor("input", input, _INPUT_PROPERTIES)

    def add_output(self, output: dict[str, Any]) -> None:
        self._add_tensor("output", output, _OUTPUT_PROPERTIES)

    def _add_tensor(self, kind: str, tensor: dict[str, Any], allowed: tuple[str, ...]) -> None:
        """Add ``tensor`` to the ``kind`` list, or complete the entry of the same name: an
        unset data_type or empty dims may be filled in, a different value is a conflict."""
        where = f"in auto-complete-config function for model '{self._name}'"
        if not isinstance(tensor, dict):
            raise ValueError(f"{kind} {where} must be a dict")
        if "name" not in tensor:
            raise ValueError(f"{kind} {where} is missing 'name' property.")
        label = f"{kind} '{tensor['name']}' {where}"
        if any(key not in allowed for key in tensor):
            names = ", ".join(f"'{p}'" for p in allowed[:-1]) + f" and '{allowed[-1]}'"
            raise ValueError(f"{label} contains property other than {names}.")
        for required in ("data_type", "dims"):
            if required not in tensor:
                raise ValueError(f"{label} is missing '{required}' property.")
        for current in self._model_config[kind]:
            if current.get("name") == tensor["name"]:
                self._merge(kind, current, tensor)
                return
        self._model_config[kind].append(tensor)

    def _merge(self, kind: str, current: dict[str, Any], tensor: dict[str, Any]) -> None:
        name = tensor["name"]
        configured_type = current.get("data_type", _UNSET_TYPE)
        if configured_type != _UNSET_TYPE and configured_type != tensor["data_type"]:
            raise ValueError(
                f"unable to load model '{self._name}', configuration expects datatype "
                f"{configured_type} for {kind} '{name}', model provides {tensor['data_type']}"
            )
        configured_dims = list(current.get("dims") or [])
        if configured_dims and configured_dims != list(tensor["dims"]):
            raise ValueError(
                f"model '{self._name}', tensor '{name}': the model expects dims "
                f"{list(tensor['dims'])} but the model configuration specifies dims "
                f"{configured_dims}"
            )
        optional_known = "optional" in tensor and "optional" in current
        if optional_known and bool(current["optional"]) != bool(tensor["optional"]):
            raise ValueError(
                f"model '{self._name}', tensor '{name}': the model expects optional "
                f"{tensor['optional']} but the model configuration specifies optional "
                f"{current['optional']}"
            )
        current.update(tensor)
