"""Where a model's Python code comes from: Triton's backend lookup, for Python models.

``backend: "python"`` runs the model's own file, ``<model>/<version>/model.py``. Any other
backend name is looked up as Triton 2.51's loader does it: a C++ library
``libtriton_<name>.so`` (in the model's directory or ``<backend-directory>/<name>``), which pbd
cannot serve, or else a Python-based backend, ``<backend-directory>/<name>/model.py``: one
``TritonPythonModel`` shared by every model that names the backend (the vLLM backend is one).
Such a model's configuration then says ``runtime: "model.py"``, and gets as its
``EXECUTION_ENV_PATH`` the environment the backend ships
(``<backend-directory>/<name>/pb_exec_env_model.py.tar.gz``) unless it names its own, as in
Triton. Its instances get the same ``initialize()`` arguments as any Python model's.
"""

from __future__ import annotations

from pathlib import Path

from pbd._proto import model_config_pb2 as mc
from pbd.modelconfig.model import ModelConfig
from pbd.modelconfig.parse import ConfigError

PYTHON = "python"
BACKEND_MODEL_FILE = "model.py"  # Triton's kPythonFilename: also the runtime's name
EXEC_ENV_PARAMETER = "EXECUTION_ENV_PATH"


def is_backend_model(backend: str) -> bool:
    """Whether ``backend`` names a Python-based backend (not the python backend itself)."""
    return backend not in ("", PYTHON)


def resolve_backend(
    message: mc.ModelConfig, model_dir: Path, backend_directory: Path, source: str
) -> None:
    """Check a model's backend as Triton's loader does and, for a Python-based backend, note
    in ``message`` what Triton notes (``runtime``, the backend's execution environment).
    ConfigError, in Triton's words and then pbd's, when nothing pbd can run is found."""
    backend = message.backend
    if message.platform or not is_backend_model(backend):
        return  # platforms (ensembles) and the python backend are the config's own business
    directory = (backend_directory / backend).absolute()
    runtime = message.runtime
    if runtime and runtime != BACKEND_MODEL_FILE:
        raise ConfigError(
            f"{source}: backend '{backend}' with runtime '{runtime}' is a C++ backend library: "
            'pbd serves Python models (backend "python", or a Python-based backend\'s model.py)'
        )
    model_file = directory / BACKEND_MODEL_FILE
    if not runtime:
        library = f"libtriton_{backend}.so"
        found = [d / library for d in (model_dir, directory) if (d / library).is_file()]
        if found:
            raise ConfigError(
                f"{source}: backend '{backend}' is a C++ backend ({found[0]}): pbd serves "
                'Python models (backend "python", or a Python-based backend\'s model.py)'
            )
        if not model_file.is_file():
            raise ConfigError(
                f"unable to find backend library for backend '{backend}', try specifying "
                f"runtime on the model configuration. ({source}: pbd serves Python models: "
                f'backend "python", or a Python-based backend\'s {model_file}; '
                f"--backend-directory is {backend_directory})"
            )
    elif not model_file.is_file():
        raise ConfigError(
            "unable to find Python backend based backend library 'model.py' for model "
            f"'{message.name or model_dir.name}', searched: '{model_file}'"
        )
    message.runtime = BACKEND_MODEL_FILE
    environment = directory / f"pb_exec_env_{BACKEND_MODEL_FILE}.tar.gz"
    if EXEC_ENV_PARAMETER not in message.parameters and environment.is_file():
        message.parameters[EXEC_ENV_PARAMETER].string_value = str(environment)


def backend_dir(backend: str, backend_directory: Path) -> Path | None:
    """The directory a Python-based backend's model.py is imported from; None for the python
    backend (the model's own version directory). Absolute: a worker need not share the
    daemon's working directory."""
    return (backend_directory / backend).absolute() if is_backend_model(backend) else None


def model_file(
    config: ModelConfig, model_dir: Path, version: int | str, backend_directory: Path
) -> tuple[Path, Path | None]:
    """(the file a model's instances run, the Python-based backend's directory or None)."""
    directory = backend_dir(config.backend, backend_directory)
    if directory is None:
        return model_dir / str(version) / config.default_model_filename, None
    return directory / BACKEND_MODEL_FILE, directory
