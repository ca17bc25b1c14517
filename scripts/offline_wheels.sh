#!/usr/bin/env bash
# pbd's dependencies, and what the GPU checks need to run, as wheels for another machine's
# Python: for a machine that reaches no package registry (a lent GPU machine).
#   scripts/offline_wheels.sh DEST [PYTHON_VERSION]     (default 3.12)
# Then, on that machine, from a copy of the checkout with DEST in it:
#   tests/gpu/run.sh --wheels DEST
# The requirements come from scripts/gpu_requirements.py (pyproject.toml's runtime
# dependencies, and what the GPU checks take from the test extra). CuPy and cuda-python are left
# out: they must match the machine's CUDA, and a GPU machine's image has its own. Wheels for
# manylinux x86_64; a project published only as a source archive (sdnotify) is built into a
# wheel here.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:?usage: scripts/offline_wheels.sh DEST [PYTHON_VERSION]}"
version="${2:-3.12}"
python="${PYTHON:-python3}"
mkdir -p "$dest"
mapfile -t wanted < <("$python" "$root/scripts/gpu_requirements.py")
platforms=()
for p in manylinux1 manylinux2014 manylinux_2_17 manylinux_2_24 manylinux_2_27 manylinux_2_28 \
         manylinux_2_31 manylinux_2_34 manylinux_2_35; do
  platforms+=(--platform "${p}_x86_64")
done
binary=() source_only=()
for requirement in "${wanted[@]}"; do
  case "$requirement" in
    sdnotify*) source_only+=("$requirement") ;;
    *) binary+=("$requirement") ;;
  esac
done
"$python" -m pip download -q --only-binary=:all: --python-version "$version" --implementation cp \
  "${platforms[@]}" -d "$dest" "${binary[@]}"
if [ "${#source_only[@]}" -gt 0 ]; then
  "$python" -m pip wheel -q --no-deps -w "$dest" "${source_only[@]}"
fi
echo "offline_wheels: $(ls "$dest"/*.whl | wc -l) wheels for Python $version in $dest ($(du -sh "$dest" | cut -f1))"
