#!/usr/bin/env bash
# Session 11, first GPU call (lent 1xH200): issue 22's record job and bench, then issue 26's static and quick
# doctor timings with the per-phase seconds every probe rank now reports (launch evidence: start_s, phase_s,
# after_result_s), and the healthy node and the faults f01, f06, f07, f15 on --quick. Repo root, $OUT set, carry .bin and .whl; one call, timeout 590:
#   bash docs/gpu-runs/s11-call-a.sh
# Writes $OUT/record.tar.gz (docs/gpu-runs/s8-record.sh's files), $OUT/record-summary.txt and $OUT/doctor/ (s8-doctor.sh's).
set -u
OUT=${OUT:?set OUT}
mkdir -p "$OUT/record" "$OUT/doctor"
OUT=$OUT/record LIMIT=${RECORD_LIMIT:-360} bash docs/gpu-runs/s8-record.sh
# the faults whose checks changed this session (quick's compute seconds and offload region, every rank's exit), and
# the healthy node; the others' checks are as in session 10 (docs/gpu-runs/s10-doctor: 16 of 16 as expected)
unchanged="f02 f03 f04 f05 f08 f09 f10 f11 f12 f13 f14"
OUT=$OUT/doctor LIMIT=${DOCTOR_LIMIT:-200} SKIP="full cold-ab $unchanged" bash docs/gpu-runs/s8-doctor.sh
# The device returns at most 8 files a call: the record part's four go back as one tarball (its summary beside it)
cp "$OUT/record/s8-summary.txt" "$OUT/record-summary.txt" 2>/dev/null
tar -czf "$OUT/record.tar.gz" -C "$OUT" record && rm -rf "$OUT/record"
