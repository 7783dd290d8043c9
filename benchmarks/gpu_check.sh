#!/usr/bin/env bash
# `make gpu-check`: every GPU claim checked by one command (benchmarks/gpu_check.py says what runs).
# On a GPU machine whose Python lacks what the check imports (mlflow, hydra-core, duckdb, diffusers, ...), the
# wheels of `make gpu-wheels` (.gpu/wheels, carried along) are installed into a folder with --no-index --no-deps
# first. Reports go to $OUT when set, else ./gpu-check. DEVICE=cpu QUICK=1 runs the same steps on the CPU.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
REPORTS=${OUT:-gpu-check}
WHEELS=.gpu/wheels
SITE=${GPU_SITE:-${TMPDIR:-/tmp}/countboard-gpu-site}
NEEDS="import mlflow, sqlalchemy, alembic, hydra, omegaconf, duckdb, diffusers"

if ! "$PY" -c "$NEEDS" 2>/dev/null; then
  if ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    echo "error: $PY cannot import what the check needs ($NEEDS) and $WHEELS holds no wheels;" \
      "run \`make gpu-wheels\` where PyPI is reachable and bring .gpu/ along" >&2
    exit 2
  fi
  echo "== installing $(ls "$WHEELS"/*.whl | wc -l) wheels from $WHEELS into $SITE"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "$WHEELS"/*.whl || { echo "error: the wheels in $WHEELS did not install into $SITE (see pip's message above)" >&2; exit 2; }
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  "$PY" -c "$NEEDS" || { echo "error: installed from $WHEELS, $PY still cannot import what the check needs" >&2; exit 2; }
fi
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"
args=(--device "$DEVICE" --out "$REPORTS")
[ -n "${QUICK:-}" ] && [ "${QUICK}" != 0 ] && args+=(--quick)
"$PY" benchmarks/gpu_check.py "${args[@]}"
