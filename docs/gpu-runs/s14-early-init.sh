#!/usr/bin/env bash
# Session 14 (issue 26), first call: the static first run with CUDA and the NCCL group initialised beside the
# trace (checks/_early_init.py) against main without it (ce7661c, session 13's final tree, carried as
# .bin/old-ce7661c.tar from `git archive ce7661c`), page cache dropped before each run, 5 rounds plain and 3 with
# --profile, interleaved; warm; the five static stack faults with this tree (f09s takes the in-process path: the
# trace resolves the preloaded libnccl too); one --quick. The summary says per run whether the init beside the
# trace stood (evidence init.beside_trace_s).
# Repo root, $OUT set, carry .bin and .whl (py-rattler's wheel for --profile); timeout 480:
#   bash docs/gpu-runs/s14-early-init.sh
set -u
OUT=${OUT:?set OUT}
BASE=ce7661c FAULTS=1 ROUNDS=${ROUNDS:-5} ROUNDS_P=${ROUNDS_P:-3} QUICK=${QUICK:-1} LIMIT=${LIMIT:-460} \
  bash docs/gpu-runs/s13-call-c.sh
