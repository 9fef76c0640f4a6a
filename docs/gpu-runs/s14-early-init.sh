#!/usr/bin/env bash
# Prepared in session 13, not run (no device time left): the static first run with CUDA and the NCCL group
# initialised beside the trace (checks/_early_init.py, this branch) against main without it (b539f4b's doctor, the
# tree measured in session 13's calls E and F). Faults first: the five static stack faults must still come out as
# before (f09s takes the in-process path: the trace resolves the preloaded libnccl too).
# Repo root, $OUT set, carry .bin/old-main.tar (`git archive <main commit> -o .bin/old-main.tar`) and .whl (py-rattler's
# wheel for --profile); timeout 300:  bash docs/gpu-runs/s14-early-init.sh
set -u
OUT=${OUT:?set OUT}
cp .bin/old-main.tar .bin/old-90def50.tar  # s13-call-c.sh's baseline name
FAULTS=1 ROUNDS=4 ROUNDS_P=3 QUICK=1 LIMIT=280 bash docs/gpu-runs/s13-call-c.sh
