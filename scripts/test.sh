#!/usr/bin/env bash
# Install pbd with its test extra into .venv, then run the linter, the type checker and the
# whole test suite.
# Extra arguments go to pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
VENV=.venv scripts/bootstrap.sh test  # the suite runs in .venv, whatever VENV says
.venv/bin/ruff check .
.venv/bin/mypy
set +e
.venv/bin/python -m pytest "$@"
status=$?
set -e
if [ "$status" = 5 ]; then
  echo "test.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$status"
