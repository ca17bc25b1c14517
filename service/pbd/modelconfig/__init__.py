"""A model's configuration: records at the bottom of the daemon's layers.

``model`` (the immutable :class:`~pbd.modelconfig.model.ModelConfig` and its parts) ·
``parse`` (config.pbtxt or its JSON form -> ModelConfig, Triton's defaults and checks) ·
``json_form`` (Triton's JSON of a config) · ``shapes`` (dims and reshape checks) ·
``ensemble`` (``ensemble_scheduling`` as an :class:`~pbd.modelconfig.ensemble.EnsembleSpec`).
This package imports only ``pbd.errors``, the generated model-config protobuf and ``pbd_wire``.
"""
