#!/usr/bin/env bash
# Bootstrap on a fresh node: a venv holding envbuild from this checkout, then `envbuild create` (when a
# profile or a bundle is given), then `envbuild doctor` on the node and the new env.
#
#   bash build_conda.sh                                     # venv + doctor of this node
#   bash build_conda.sh --profile slime-v0.3.1-cu130 [--prefix DIR | --name N]
#   bash build_conda.sh --bundle slime.tar [--prefix DIR]   # air-gapped: everything from the bundle
#
# Flags for the doctor (--json F, --junit F, --prometheus F, --strict, --quick, --full, -q) go to the doctor;
# every other flag goes to `envbuild create` (e.g. --dry-run, --backend micromamba, --force). --profile
# and the env's prefix go to both.
#
# Idempotent: the venv is reused (reinstalled only when pyproject.toml changed), create does nothing when
# the env was built from the same locks, the doctor only reads. No network beyond pip's own index. With a
# bundle packed with --tool-python, envbuild itself is installed from the bundle (no PyPI at all);
# otherwise PIP_NO_INDEX=1 PIP_FIND_LINKS=<wheel dir> bootstraps it offline.
# Environment: ENVBUILD_VENV (default <repo>/.venv), PYTHON (default python3), ENVBUILD_ENVS_DIR.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${ENVBUILD_VENV:-$here/.venv}"
python="${PYTHON:-python3}"

create_args=() doctor_args=() profile="" prefix="" name="" bundle=""
while [ $# -gt 0 ]; do
  case "$1" in
    --profile|-p) profile="${2:?--profile needs a value}"; shift 2 ;;
    --profile=*) profile="${1#*=}"; shift ;;
    --prefix) prefix="${2:?--prefix needs a value}"; shift 2 ;;
    --prefix=*) prefix="${1#*=}"; shift ;;
    --name|-n) name="${2:?--name needs a value}"; shift 2 ;;
    --name=*) name="${1#*=}"; shift ;;
    --bundle) bundle="${2:?--bundle needs a value}"; shift 2 ;;
    --bundle=*) bundle="${1#*=}"; shift ;;
    --json|--junit|--prometheus) doctor_args+=("$1" "${2:?$1 needs a value}"); shift 2 ;;
    --json=*|--junit=*|--prometheus=*|--strict|--quick|--full|-q|--quiet) doctor_args+=("$1"); shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) create_args+=("$1"); shift ;;
  esac
done

# Copy the bundle's tool/ (envbuild's dependency wheels, from `pack --tool-python`) into $2, each file
# checked against the bundle manifest; status 3 when the bundle has none.
bundle_tool() {
  "$python" - "$1" "$2" <<'PY'
import hashlib, json, os, sys, tarfile
bundle, dest = sys.argv[1], sys.argv[2]
with tarfile.open(bundle) as tar:
    members = json.load(tar.extractfile("envbuild-bundle.json"))["members"]
    tool = [m for m in tar.getmembers() if m.isfile() and m.name.startswith("tool/") and "/" not in m.name[5:]]
    if not tool:
        sys.exit(3)
    os.makedirs(dest, exist_ok=True)
    for m in tool:
        data = tar.extractfile(m).read()
        if hashlib.sha256(data).hexdigest() != members.get(m.name, {}).get("sha256"):
            sys.exit(f"build_conda.sh: {bundle}: member {m.name} does not match the bundle manifest")
        with open(os.path.join(dest, m.name[5:]), "wb") as out:
            out.write(data)
    want = open(os.path.join(dest, "python-version")).read().strip()
    have = "%d.%d" % sys.version_info[:2]
    if want != have:
        sys.exit(f"build_conda.sh: the bundle's envbuild wheels are for Python {want}, {sys.executable} is {have}; "
                 f"run with PYTHON=python{want}, or pack with --tool-python {have}")
PY
}

# 1. the venv with envbuild (python >= 3.9), reinstalled only when pyproject.toml changed
"$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 9) else "envbuild needs Python >= 3.9, this is " + sys.version.split()[0])'
stamp="$venv/.envbuild-installed"
want="$("$python" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$here/pyproject.toml")"
if [ ! -x "$venv/bin/envbuild" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv" || { echo "build_conda.sh: '$python -m venv' failed (Debian/Ubuntu: install python3-venv)" >&2; exit 2; }
  fi
  tool="$venv/.envbuild-tool" use_tool=no
  if [ -n "$bundle" ]; then
    st=0; bundle_tool "$bundle" "$tool" || st=$?
    case "$st" in 0) use_tool=yes ;; 3) ;; *) exit 2 ;; esac
  fi
  # envbuild needs from the venv's pip only `pip install -e` of a pyproject-only project (PEP 660: pip >= 21.3)
  # and --require-hashes; locking and the env's pip layer run uv (a pinned dependency), never this pip. A stock
  # venv's pip is fine from Python 3.9.9 on (ensurepip 21.2.4 before that is too old): upgrade only then.
  if ! "$venv/bin/python" -c 'import sys, pip; v = tuple(int(x) for x in pip.__version__.split(".")[:2]); sys.exit(v < (21, 3))' 2>/dev/null; then
    from_tool=(); [ "$use_tool" = yes ] && from_tool=(--no-index --find-links "$tool")
    "$venv/bin/python" -m pip install -q --disable-pip-version-check ${from_tool[@]+"${from_tool[@]}"} 'pip>=23.2.1' \
      || { echo "build_conda.sh: the venv's pip is older than 21.3 and could not be upgraded (pip>=23.2.1)" >&2; exit 2; }
  fi
  if [ "$use_tool" = yes ]; then  # air-gapped: envbuild's dependencies from the bundle, hash-checked
    pipi=("$venv/bin/python" -m pip install -q --disable-pip-version-check --no-index --find-links "$tool")
    "${pipi[@]}" --require-hashes --no-deps -r "$tool/requirements.lock.txt"
    "${pipi[@]}" --no-deps --no-build-isolation -e "$here"
  else
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -e "$here"
  fi
  echo "$want" > "$stamp"
fi
envbuild="$venv/bin/envbuild"

# 2. create (only when there is something to create)
if [ -n "$bundle" ] && [ -z "$profile" ]; then  # the bundle knows its profile: the doctor needs it too
  profile="$("$venv/bin/python" -c 'import json, sys, tarfile
with tarfile.open(sys.argv[1]) as t: print(json.load(t.extractfile("envbuild-bundle.json"))["profile"])' "$bundle")"
fi
if [ -n "$prefix" ]; then
  target="$prefix"
elif [ -n "$profile" ]; then
  target="${ENVBUILD_ENVS_DIR:-$HOME/.envbuild/envs}/${name:-$profile}"
else
  target=""
fi
if [ -n "$profile" ]; then
  args=(create --profile "$profile" --prefix "$target")
  [ -n "$bundle" ] && args+=(--bundle "$bundle")
  "$envbuild" "${args[@]}" ${create_args[@]+"${create_args[@]}"}
  for a in ${create_args[@]+"${create_args[@]}"}; do
    [ "$a" = "--dry-run" ] && exit 0  # nothing was built: nothing to examine
  done
elif [ ${#create_args[@]} -gt 0 ]; then
  echo "build_conda.sh: '${create_args[*]}' needs --profile or --bundle" >&2
  exit 2
fi

# 3. doctor: the node, and the env when there is one (a bundle's profile.toml is where create extracted
#    and verified the bundle; no second pass over gigabytes)
dargs=(doctor)
if [ -n "$bundle" ]; then
  profile="$("$venv/bin/python" -c 'import sys
from pathlib import Path
from envbuild.install.bundle import default_workdir, open_bundle
toml = default_workdir(Path(sys.argv[1]).absolute()) / "locks" / sys.argv[2] / "profile.toml"
if not toml.is_file():
    b = open_bundle(sys.argv[1])
    toml = b.lock_dir / b.profile / "profile.toml"
print(toml)' "$bundle" "$profile")"
fi
[ -n "$profile" ] && dargs+=(--profile "$profile" --prefix "$target")
exec "$envbuild" "${dargs[@]}" ${doctor_args[@]+"${doctor_args[@]}"}
