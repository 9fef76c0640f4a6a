#!/usr/bin/env bash
# Bootstrap on a fresh node: a venv holding envbuild from this checkout, then (with --profile) create the
# profile's environment, then run the doctor. Idempotent: a second run reuses the venv.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${ENVBUILD_VENV:-$here/.venv}"
if [ ! -x "$venv/bin/envbuild" ]; then
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -e "$here"
fi
"$venv/bin/envbuild" doctor "$@"
