"""pb_utils refuses bad arguments as Triton's bindings do (Triton's L0_backend_python
argument_validation): the same exception class for each case, through a real daemon.

``TRITON_2_51`` is what Triton 2.51's python_backend raised for the same model.py
(tests/integration/qa_models/argument_validation), case by case ("": nothing raised).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pbd_harness import DaemonFactory, infer_input, make_repository

QA_MODELS = Path(__file__).resolve().parent / "qa_models"

TRITON_2_51 = {
    "request inputs=[None]": "TritonModelException",
    "request inputs=None": "TypeError",
    "request model_name=None": "TypeError",
    "request no model_name": "TypeError",
    "request no inputs": "TypeError",
    "request no requested_output_names": "TypeError",
    "request requested_output_names=[None]": "TypeError",
    "request requested_output_names=None": "TypeError",
    "request correlation_id=None": "TypeError",
    "request request_id=None": "TypeError",
    "request model_version=None": "TypeError",
    "request flags=None": "TypeError",
    "request empty lists": "",
    "response output_tensors=[None]": "TritonModelException",
    "response output_tensors=None": "TypeError",
    "response output_tensors=[]": "",
    "tensor name=None": "TypeError",
    "tensor array=None": "TypeError",
    "tensor name='' array=None": "TypeError",
    "from_dlpack capsule=None": "TritonModelException",
    "from_dlpack name='' capsule=None": "TritonModelException",
    "log level=None": "TypeError",
    "log level=1": "TypeError",
    "log level=Invalid Level": "TypeError",
    "log_info(None)": "TypeError",
    "log_warn(None)": "TypeError",
    "log_error(None)": "TypeError",
    "log_verbose(None)": "TypeError",
    "log without level": "",
    "log level=Logger.WARNING": "",
    "log_info(123)": "TypeError",
    "request inputs=[ndarray]": "TypeError",
    "request inputs=tuple": "",
    "request correlation_id=1.5": "TritonModelException",
    "request model_name=b'm'": "",
    "response error only": "",
    "response output_tensors=[ndarray]": "TypeError",
    "tensor name=''": "TritonModelException",
    "tensor array=list": "TypeError",
}


def test_every_case_raises_what_triton_raises(start_daemon: DaemonFactory, tmp_path: Path) -> None:
    model = "argument_validation"
    daemon = start_daemon(make_repository(tmp_path, {model: QA_MODELS / model}), settle=[model])
    result = daemon.client().infer(model, [infer_input("DUMMY", np.zeros(1, np.int32), "INT32")])
    cases = [c.decode() for c in result.as_numpy("CASES")]
    raised = [r.decode() for r in result.as_numpy("RAISED")]
    assert dict(zip(cases, raised, strict=True)) == TRITON_2_51
