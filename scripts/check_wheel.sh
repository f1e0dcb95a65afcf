#!/usr/bin/env bash
# Does the wheel work outside the checkout? Builds it from the tracked files with .venv's pip, installs it into a
# fresh venv in a temporary folder (torch first: $TORCH, default the CPU build torch==2.13.0, since the wheel's
# open `torch>=2.4` could otherwise pull a multi-GB CUDA build), then runs `morkit --help`, `morkit rms` and
# `morkit demo --no-live` from another temporary folder with the cache there too. Prints the timings, the wheel's
# size and the venv's; exits non-zero at the first step that fails, showing that step's output.
# Run it as `make wheel-check` (after `make install`), or `bash scripts/check_wheel.sh`; KEEP=1 keeps the folder.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_PY=${BUILD_PY:-$ROOT/.venv/bin/python}
PYTHON=${PYTHON:-python3}
TORCH=${TORCH:-torch==2.13.0}
if [ ! -x "$BUILD_PY" ]; then
  echo "check_wheel: $BUILD_PY not found: run make install first" >&2
  exit 2
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/morkit-wheel-check.XXXXXX")
LOG=$WORK/step.log
cleanup() {
  if [ "${KEEP:-0}" = 1 ]; then echo "check_wheel: kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

now() { date +%s.%N; }
# step NAME COMMAND...: runs the command with its output in $LOG; prints its time, or its output and fails.
step() {
  local name=$1 start status
  shift
  start=$(now)
  set +e
  "$@" >"$LOG" 2>&1
  status=$?
  set -e
  if [ "$status" -ne 0 ]; then
    echo "check_wheel: FAILED: $name (exit $status): $*" >&2
    tail -n 40 "$LOG" >&2
    exit "$status"
  fi
  awk -v n="$name" -v a="$start" -v b="$(now)" 'BEGIN { printf "  %-34s %6.1f s\n", n, b - a }'
}

echo "check_wheel: in $WORK"
# A copy of the tracked and unignored files, so a stale build/ or egg-info in the checkout cannot reach the wheel.
mkdir -p "$WORK/src"
if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
  git -C "$ROOT" ls-files -z --cached --others --exclude-standard \
    | (cd "$ROOT" && xargs -0 sh -c 'for f; do if [ -e "$f" ]; then printf "%s\0" "$f"; fi; done' _) \
    | tar -C "$ROOT" --null -T - -cf - | tar -C "$WORK/src" -xf -
else
  tar -C "$ROOT" --exclude=./.venv --exclude=./build --exclude='*.egg-info' -cf - . | tar -C "$WORK/src" -xf -
fi

step "build the wheel" "$BUILD_PY" -m pip wheel -q --no-deps --no-build-isolation -w "$WORK/dist" "$WORK/src"
WHEEL=$(ls "$WORK"/dist/morkit-*.whl)
echo "  wheel: $(basename "$WHEEL"), $(du -h "$WHEEL" | cut -f1) ($(stat -c %s "$WHEEL") bytes)"

VENV=$WORK/venv
step "create a fresh venv" "$PYTHON" -m venv "$VENV"
step "install $TORCH" "$VENV/bin/python" -m pip install -q "$TORCH"
step "install the wheel and its deps" "$VENV/bin/python" -m pip install -q "$WHEEL"
echo "  fresh venv: $(du -sh "$VENV" | cut -f1)"

# Outside the checkout, with the venv's bin first on PATH (as `source venv/bin/activate` does) and nothing else
# that could import the checkout's morkit.
mkdir -p "$WORK/run"
cd "$WORK/run"
export PATH="$VENV/bin:$PATH" MORKIT_CACHE_DIR="$WORK/run/cache"
unset PYTHONPATH VIRTUAL_ENV MORKIT_DATA_DIR  # nothing of the checkout's world
step "morkit is the installed copy" python -c "import morkit, sys; sys.exit(not morkit.__file__.startswith('$VENV/'))"
step "morkit --help" morkit --help
step "morkit rms" morkit rms
step "morkit demo --no-live" morkit demo --no-live
grep -q "Demo done" "$LOG" || { echo "check_wheel: FAILED: the demo did not finish" >&2; tail -n 40 "$LOG" >&2; exit 1; }
echo "check_wheel: the wheel installs and runs outside the checkout"
