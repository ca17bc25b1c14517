#!/usr/bin/env bash
# Regenerate the checked-in protobuf code from protos/ (messages only: the daemon registers
# its handlers by wire name, so no grpc stubs). Needs grpcio-tools 1.81.x, the last line that
# makes protobuf-6 code (tritonclient needs protobuf < 7); the test extra installs it.
#   scripts/gen_protos.sh [OUT_ROOT]    OUT_ROOT defaults to the checkout
# PYTHON picks the interpreter (default: the checkout's .venv). Works from any directory.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
out="${1:-$root}"
protos="$root/protos"
mkdir -p "$out/service" "$out/workers"
# -I protos makes each file's proto name pbd/_proto/x.proto (pbd_wire/worker.proto), so imports
# in the generated code read `from pbd._proto import model_config_pb2`.
"$python" -m grpc_tools.protoc -I "$protos" \
  --python_out="$out/service" --pyi_out="$out/service" \
  "$protos"/pbd/_proto/model_config.proto \
  "$protos"/pbd/_proto/grpc_service.proto \
  "$protos"/pbd/_proto/health.proto \
  "$protos"/pbd/_proto/front.proto
"$python" -m grpc_tools.protoc -I "$protos" \
  --python_out="$out/workers" --pyi_out="$out/workers" \
  "$protos"/pbd_wire/worker.proto
