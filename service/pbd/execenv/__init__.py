"""Per-model Python environments (config parameter ``EXECUTION_ENV_PATH``)."""
