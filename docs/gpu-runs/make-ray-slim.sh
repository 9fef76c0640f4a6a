#!/usr/bin/env bash
# Rebuild .bin/ray-slim.tar.xz, the Ray the GPU runs carry (the device image has torch but no ray, and ray's
# wheel, about 75 MiB, is over the 64 MiB a call may carry). Run on the CPU machine, in the repo root:
#   bash docs/gpu-runs/make-ray-slim.sh            (RAY_VERSION=2.60.0 PY=3.12 by default)
# It downloads the manylinux x86_64 wheel for the device's Python with pip, unpacks it, drops what a driver,
# `ray start` and its workers do not load (the Java jars, rllib, data, serve, train, tune, llm, the
# dashboard's web build, tests) and packs the rest as one xz tar for `tar -xJf .bin/ray-slim.tar.xz -C /tmp/site`.
# Ray's own dependencies (click, filelock, jsonschema, msgpack, packaging, protobuf, pyyaml, requests) are in the
# device image (KINDS.md's package list); jsonschema and its dependencies are not, nor detect-secrets (the
# recorder scrubs secrets with it; its own needs, pyyaml and requests, are there): they go to .whl, with
# torch_memory_saver (TMS=0 leaves it out) for the rollout's pause/resume. .gitignore ignores both folders.
set -eu
RAY_VERSION=${RAY_VERSION:-2.60.0}
PY=${PY:-3.12}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d "$tmp/wheel" "ray==$RAY_VERSION"
mkdir -p "$tmp/site" .bin
python3 -m zipfile -e "$tmp"/wheel/ray-*.whl "$tmp/site"
# zipfile drops the modes the wheel's RECORD-less binaries need: gcs_server, raylet and the rest under ray/core
find "$tmp/site/ray/core" -type f -exec chmod u+x {} +
cd "$tmp/site"
rm -rf ray/jars ray/rllib ray/data ray/serve ray/train ray/tune ray/llm ray/tests ray/dashboard/client/build
find . -name '__pycache__' -prune -exec rm -rf {} +
cd - > /dev/null
tar -C "$tmp/site" -cf - . | xz -9 -T0 > .bin/ray-slim.tar.xz
extra="jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 detect-secrets==1.5.0"
[ "${TMS:-1}" = 1 ] && extra="$extra torch_memory_saver==0.0.10"
for w in $extra; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "$w"
done
ls -la .bin/ray-slim.tar.xz .whl
