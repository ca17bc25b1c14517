#!/usr/bin/env bash
# A longer coverage-guided fuzz run of one target (tests/fuzz/fuzz_targets.py), for SECONDS.
#   scripts/fuzz.sh TARGET SECONDS [libFuzzer flags...]
# TARGET: grpc_request | http_request | config_pbtxt | config_json | framing | all
# The corpus grows in fuzz-out/TARGET/corpus (kept between runs); crashes and hangs land in
# fuzz-out/TARGET/ as crash-* / timeout-* and make the script exit non-zero.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
target="${1:?usage: scripts/fuzz.sh TARGET SECONDS [libFuzzer flags...]}"
seconds="${2:?usage: scripts/fuzz.sh TARGET SECONDS [libFuzzer flags...]}"
shift 2
python=.venv/bin/python
[ -x "$python" ] || { echo "fuzz.sh: run scripts/bootstrap.sh test first" >&2; exit 1; }

run_one() {
  local name="$1" out="fuzz-out/$1"
  shift
  mkdir -p "$out/corpus" "$out/tmp"
  "$python" tests/fuzz/fuzz_targets.py "$name" --seed "$out/corpus"
  set +e
  (cd "$out" && TMPDIR="$root/$out/tmp" "$root/$python" "$root/tests/fuzz/fuzz_targets.py" \
     "$name" corpus -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
     -print_final_stats=1 "$@" 2>&1 | grep -av '^INFO: Instrumenting' | tee log.txt)
  local status=${PIPESTATUS[0]}
  set -e
  rm -rf "$out/tmp"
  echo "fuzz.sh: $name: $(grep -ao 'Done [0-9]* runs in [0-9]* second(s)' "$out/log.txt" || echo 'no summary'), exit $status"
  return "$status"
}

if [ "$target" = all ]; then
  for name in grpc_request http_request config_pbtxt config_json framing; do
    run_one "$name" "$@"
  done
else
  run_one "$target" "$@"
fi
