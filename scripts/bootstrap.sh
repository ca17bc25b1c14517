#!/usr/bin/env bash
# Create .venv (Python >= 3.11) in the checkout and install pbd into it.
#   scripts/bootstrap.sh          runtime only
#   scripts/bootstrap.sh test     with the test extra
#   scripts/bootstrap.sh test,gpu,gpu-test   extras, comma-separated (GPU: CuPy, cuda-python)
# PYTHON=... picks the interpreter (default: the first python3.1x >= 3.11 on PATH); VENV=...
# the environment's directory in the checkout (default .venv), e.g. a second environment on
# the distribution's interpreter for `bench.vs_triton --python` (bench/README.md):
#   PYTHON=/usr/bin/python3 VENV=.venv-system scripts/bootstrap.sh
# On a fresh Debian machine run as root it installs python3-venv when venv is missing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
extra="${1:-}"
venv="${VENV:-.venv}"
case "$venv" in
  ""|/*|*..*) echo "bootstrap: VENV must be a directory inside the checkout, not '$venv'" >&2; exit 1 ;;
esac

python="${PYTHON:-}"
if [ -z "$python" ]; then
  for candidate in python3.13 python3.12 python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      python="$candidate"; break
    fi
  done
fi
[ -n "$python" ] || { echo "bootstrap: need Python >= 3.11" >&2; exit 1; }

if [ ! -x "$venv/bin/python" ]; then
  if ! "$python" -m venv "$venv" 2>/dev/null; then
    rm -rf "$venv"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
      "$python" -m venv "$venv"
    else
      echo "bootstrap: '$python -m venv' failed; install your distribution's venv package" >&2
      exit 1
    fi
  fi
fi
"$venv/bin/python" -m pip install -q --upgrade pip
if [ -n "$extra" ]; then
  "$venv/bin/python" -m pip install -q -e ".[$extra]"
else
  "$venv/bin/python" -m pip install -q -e .
fi
