#!/usr/bin/env bash
# Install the real Triton Inference Server (2.51, with its python_backend) into .triton/ of the
# checkout, for `python -m bench.vs_triton`; print the path of the launcher it makes.
#   scripts/triton.sh           install if missing (idempotent), print .triton/tritonserver
#
# Triton comes from the nvidia-pytriton 0.7.0 wheel (it bundles tritonserver 2.51, the python
# backend, per-Python stubs and the shared libraries they need). The stub runs models with the
# system's Python 3.11 (/usr/bin/python3; PYTHONPATH is not used), which needs numpy: as root on
# Debian, python3-numpy is installed with apt-get when `import numpy` fails there.
# .triton/tritonserver sets LD_LIBRARY_PATH and passes --backend-directory, then execs the real
# binary (same PID); any tritonserver flag can follow. No GPU is needed (CUDA warnings are normal).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/.triton"
version="0.7.0"            # nvidia-pytriton, bundles Triton 2.51
pystub="3.11"              # the stub built for the system Python that runs the models
system_python=/usr/bin/python3
launcher="$dest/tritonserver"
server_dir="$dest/pytriton/tritonserver"

if ! "$system_python" -c 'import numpy' 2>/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "triton.sh: installing python3-numpy for $system_python (Triton's stub needs it)" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-numpy >&2
  else
    echo "triton.sh: $system_python cannot import numpy; install python3-numpy" >&2
    exit 1
  fi
fi
have="$("$system_python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
if [ "$have" != "$pystub" ]; then
  echo "triton.sh: $system_python is $have, the stub installed is for $pystub" >&2
  exit 1
fi

if [ ! -x "$launcher" ] || [ ! -x "$server_dir/backends/python/triton_python_backend_stub" ]; then
  pip=(python3 -m pip)
  [ -x "$root/.venv/bin/python" ] && pip=("$root/.venv/bin/python" -m pip)
  rm -rf "$dest"
  download="$(mktemp -d "$root/.triton-download.XXXXXX")"
  trap 'rm -rf "$download"' EXIT
  echo "triton.sh: downloading nvidia-pytriton==$version (~55 MB)" >&2
  "${pip[@]}" download -q --no-deps --only-binary=:all: "nvidia-pytriton==$version" -d "$download" >&2
  wheel="$(ls "$download"/nvidia_pytriton-"$version"-*.whl)"
  mkdir -p "$download/tree"
  # zipfile (unzip may be missing) keeps no modes: the executables are made so below.
  "$system_python" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
    "$wheel" "$download/tree"
  tree="$download/tree"
  mkdir -p "$dest"
  mv "$tree/pytriton" "$tree/nvidia_pytriton.libs" "$dest/"
  chmod +x "$server_dir/bin/tritonserver" "$dest"/nvidia_pytriton.libs/*.so*
  # The backend looks for the stub next to libtriton_python.so; there its RPATH
  # ($ORIGIN/../../../../nvidia_pytriton.libs) still finds the bundled libraries.
  install -m 0755 "$server_dir/python_backend_stubs/$pystub/triton_python_backend_stub" \
    "$server_dir/backends/python/triton_python_backend_stub"
  # Written under another name and moved last: a launcher there means a complete install.
  cat > "$launcher.new" <<EOF
#!/bin/sh
# Made by scripts/triton.sh: Triton 2.51 from nvidia-pytriton $version with its python backend.
export LD_LIBRARY_PATH="$dest/nvidia_pytriton.libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$server_dir/bin/tritonserver" --backend-directory "$server_dir/backends" "\$@"
EOF
  chmod +x "$launcher.new"
  # --help exits 1; that it prints the flags shows the binary and its libraries load.
  help="$("$launcher.new" --help 2>&1 || true)"
  case "$help" in
    *--model-repository*) ;;
    *) echo "triton.sh: $launcher.new --help does not run: ${help: -500}" >&2; exit 1 ;;
  esac
  mv "$launcher.new" "$launcher"
fi
echo "$launcher"
