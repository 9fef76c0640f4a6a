#!/usr/bin/env bash
# Session 11, first GPU call (lent 1xH200): issue 22's record job and bench, then issue 26's static and quick
# doctor timings with the per-phase seconds every probe rank now reports (launch evidence: start_s, phase_s,
# after_result_s). Repo root, $OUT set, carry .bin and .whl; one call, timeout 590:
#   bash docs/gpu-runs/s11-call-a.sh
# Writes $OUT/record/ (docs/gpu-runs/s8-record.sh's files) and $OUT/doctor/ (s8-doctor.sh's, static and quick).
set -u
OUT=${OUT:?set OUT}
mkdir -p "$OUT/record" "$OUT/doctor"
OUT=$OUT/record LIMIT=${RECORD_LIMIT:-420} bash docs/gpu-runs/s8-record.sh
faults="healthy f01 f02 f03 f04 f05 f06 f07 f08 f09 f10 f11 f12 f13 f14 f15"
OUT=$OUT/doctor LIMIT=${DOCTOR_LIMIT:-130} SKIP="full cold-ab $faults" bash docs/gpu-runs/s8-doctor.sh
