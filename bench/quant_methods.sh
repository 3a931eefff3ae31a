#!/usr/bin/env bash
# Mean KL against the F32 source of one weight type quantized by each method pagoda has: plain
# rounding, GPTQ, AWQ, AWQ + GPTQ, and GPTQ / AWQ + GPTQ with an importance matrix. Calibration
# on the first half of tinystories_valid_head.txt, scoring on the second (as
# bench/quant_quality.py cuts them). Tables: docs/BENCHMARKS.md, "GPTQ after AWQ's scaling".
#
#   bench/quant_methods.sh F32.gguf TYPE [CHUNKS=64] [WINDOWS=200] [THREADS=2]
set -euo pipefail
cd "$(dirname "$0")/.."
model=$1 type=$2 chunks=${3:-64} windows=${4:-200} threads=${5:-2}
pagoda=build/pagoda
text="${PAGODA_SHARED:-../shared}/testdata/text/tinystories_valid_head.txt"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$text" "$work" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines(keepends=True)
half = len(lines) // 2
open(sys.argv[2] + "/calibrate.txt", "w").write("".join(lines[:half]))
open(sys.argv[2] + "/evaluate.txt", "w").write("".join(lines[half:]))
PY
cal="$work/calibrate.txt"
"$pagoda" imatrix -m "$model" -f "$cal" -c 128 --chunks "$chunks" -o "$work/imatrix.gguf" \
  -t "$threads" >/dev/null 2>&1
awq=(--awq "$cal" --awq-ctx 128 --awq-chunks "$chunks")
gptq=(--gptq "$cal" --gptq-ctx 128 --gptq-chunks "$chunks")
imatrix=(--imatrix "$work/imatrix.gguf")
for method in rtn gptq awq awq+gptq gptq+imatrix awq+gptq+imatrix; do
  args=()
  [[ $method == *awq* ]] && args+=("${awq[@]}")
  [[ $method == *gptq* ]] && args+=("${gptq[@]}")
  [[ $method == *imatrix* ]] && args+=("${imatrix[@]}")
  "$pagoda" quantize -i "$model" -o "$work/out.gguf" --type "$type" -q -t "$threads" \
    ${args[@]+"${args[@]}"} >/dev/null
  kl=$("$pagoda" bench quality -m "$work/out.gguf" --ref "$model" -f "$work/evaluate.txt" -c 128 \
    --max-windows "$windows" -t "$threads" --json - 2>/dev/null |
    python3 -c "import json, sys; print('%.5f' % json.load(sys.stdin)['kl_mean'])")
  echo "$(basename "$model") $type $method $kl"
done
