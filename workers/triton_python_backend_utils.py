"""``import triton_python_backend_utils as pb_utils``: the Triton Python-backend API, served by pbd.

Unmodified Triton models import this module by name. Everything is implemented in
``pbd_worker.model_api``; this file only re-exports the public names.
"""

from __future__ import annotations

from pbd_worker.model_api import *  # noqa: F403 - the module is the re-export
from pbd_worker.model_api import __all__ as __all__
