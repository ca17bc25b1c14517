#!/usr/bin/env bash
# Every GPU check in one go: the tests marked `gpu`, run where an NVIDIA GPU is visible.
# Without a GPU they are skipped, each with its reason. Prints pytest's summary table.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
[ -x .venv/bin/python ] || scripts/bootstrap.sh test
nvidia-smi -L 2>/dev/null || echo "gpu/run.sh: no nvidia-smi; GPU tests will skip"
exec .venv/bin/python -m pytest -m gpu -rA -q tests "$@"
