#!/usr/bin/env bash
# Regenerate the checked-in protobuf code from protos/ (messages only: handlers are
# registered by wire name). Needs grpcio-tools 1.81.x, the last line that makes protobuf-6
# code (tritonclient needs protobuf < 7); the test extra installs it.
#   scripts/gen_protos.sh [OUT_ROOT]    OUT_ROOT defaults to the checkout
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
out="${1:-$root}"
mkdir -p "$out/service" "$out/workers"
cd "$root/protos"
"$python" -m grpc_tools.protoc -I . --python_out="$out/service" --pyi_out="$out/service" \
  pbd/_proto/model_config.proto pbd/_proto/grpc_service.proto pbd/_proto/health.proto
"$python" -m grpc_tools.protoc -I . --python_out="$out/workers" --pyi_out="$out/workers" \
  pbd_worker/_proto/worker.proto
