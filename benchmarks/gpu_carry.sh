#!/usr/bin/env bash
# Builds .gpu-carry/ (git-ignored): the wheels benchmarks/gpu_check.py needs on the lent GPU machine
# beyond what that machine has. It has Python 3.12 with PyTorch, transformers, accelerate, pandas,
# pyarrow, PyYAML, numpy and the rest of their needs, and no network, so it lacks:
#   pydantic (+ pydantic-core, annotated-types, typing-inspection): the experiment's typed settings;
#     typing-extensions travels too, since this pydantic needs a release newer than that machine
#     may have;
#   TRL, and datasets (+ dill, multiprocess), which TRL's GRPOTrainer reads its prompts from.
# Pure-Python wheels are downloaded once; the two with code per Python version (pydantic-core's
# compiled core, multiprocess) once for each of the lent machine's Python (3.12) and this one's
# (the dry run here installs the same set). The versions are the ones the project's venvs run.
#
#   bash benchmarks/gpu_carry.sh        # or: make gpu-carry
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${GPU_CARRY:-.gpu-carry}
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
HERE=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
VERSIONS=$(printf '%s\n' 3.12 "$HERE" | sort -u)
PURE=(trl==1.16.0 datasets==5.2.0 dill==0.4.1 pydantic==2.14.4 annotated-types==0.8.0
      typing-inspection==0.4.5 typing-extensions==4.16.0)
PER_PYTHON=(pydantic-core==2.50.5 multiprocess==0.70.19)
# manylinux tags pip matches one by one: the lent machine is x86-64 Linux
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64)
# this machine's pip config names optional local indexes that may not exist; hide those warnings
quiet() { "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }; }

rm -rf "$OUT"
mkdir -p "$OUT"
for v in $VERSIONS; do
  quiet "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$v" \
    --implementation cp "${PLATFORMS[@]}" -d "$OUT" "${PURE[@]}" "${PER_PYTHON[@]}"
done
ls -l "$OUT"/*.whl | awk '{printf "  %8.2f MiB  %s\n", $5 / 1048576, $9}'
carried=$(du -cb "$OUT"/*.whl | tail -1 | cut -f1)
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 -r du -cb 2>/dev/null |
       awk '$2 == "total" {s += $1} END {print s + 0}')
printf '%s: %d wheels, %.1f MiB; with the working tree that travels beside it %.1f MiB ' \
  "$OUT" "$(ls "$OUT"/*.whl | wc -l)" "$(echo "$carried / 1048576" | bc -l)" \
  "$(echo "($carried + $tree) / 1048576" | bc -l)"
echo "(the lent machine takes 64 MiB in all)"
[ $((carried + tree)) -le $((64 * 1048576)) ] || { echo "over 64 MiB"; exit 1; }
