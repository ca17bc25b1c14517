#!/usr/bin/env bash
# Every GPU check in one go: the tests marked `gpu` (tests/gpu and the GPU cases elsewhere),
# then, where a GPU is visible, the CUDA shared-memory benchmark (256 MiB identity against a
# device-to-device copy). Without a GPU the tests are skipped, each with its reason.
# Prints pytest's per-test table (-rA), then the benchmark's table.
#   tests/gpu/run.sh [pytest args...]
# Installs the gpu and gpu-test extras (CuPy, cuda-python) into .venv when a GPU is visible and
# they are missing.
#   tests/gpu/run.sh --wheels DIR [pytest args...]
# A machine that reaches no registry (a lent GPU machine): no .venv; the machine's own python3
# (with its own CuPy and cuda-python) gets pbd installed from the wheels in DIR, made
# elsewhere by scripts/offline_wheels.sh for that Python; what it has already is kept.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
gpu=0
if [ -n "$(ls /proc/driver/nvidia/gpus 2>/dev/null)" ]; then gpu=1; fi
python=.venv/bin/python
if [ "${1:-}" = "--wheels" ]; then
  wheels="$(cd "${2:?--wheels needs a directory}" && pwd)"
  shift 2
  python="${PYTHON:-python3}"
  mapfile -t wanted < <("$python" scripts/gpu_requirements.py)
  "$python" -m pip install -q --no-index --find-links "$wheels" --no-build-isolation \
    -e . "${wanted[@]}"
elif [ ! -x .venv/bin/python ]; then
  if [ "$gpu" = 1 ]; then VENV=.venv scripts/bootstrap.sh test,gpu,gpu-test; else VENV=.venv scripts/bootstrap.sh test; fi
elif [ "$gpu" = 1 ] && ! .venv/bin/python -c 'import cupy, cuda.bindings.runtime' 2>/dev/null; then
  .venv/bin/python -m pip install -q -e ".[test,gpu,gpu-test]"
fi
nvidia-smi -L 2>/dev/null || echo "gpu/run.sh: no nvidia-smi; GPU tests will skip"
status=0
"$python" -m pytest -m gpu -rA -q -p no:cacheprovider tests "$@" || status=$?
if [ "$gpu" = 1 ] && [ "$status" = 0 ]; then
  "$python" -m bench.cuda_shm --seconds 3 || status=$?
fi
exit "$status"
