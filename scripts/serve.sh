#!/usr/bin/env bash
# Install pbd into .venv, with what the README's "Try it" clients need (the examples extra:
# tritonclient), and serve the bundled example models on 127.0.0.1:8001.
# Extra arguments go to `pbd serve` (see `.venv/bin/pbd serve --help`).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV=.venv "$root/scripts/bootstrap.sh" examples
exec "$root/.venv/bin/pbd" serve --model-repository "$root/examples/models" "$@"
