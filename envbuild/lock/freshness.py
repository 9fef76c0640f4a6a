"""The one rule for "is the lock fresh for this profile", used by `lock --check`, `create` and `pack`.

A lock is fresh when (1) it was locked from what the profile asks for now — conda-lock's content_hash per
platform equals the hash of the rendered spec, the rendered spec files equal what the [recipe] renders, and
a pip lock exists exactly when the recipe has pip requirements — and (2) its entries are the ones
`envbuild lock` wrote: each lock carries a seal, the sha256 of its entries, so a hand-edited or tampered
entry (a changed sha256, url or version) is stale too, not "fresh". Staleness is judged on inputs, never
on a channel publishing something newer (the scheduled re-lock picks those up), and nothing here solves
or touches the network.

Seals: conda-lock.yml keeps it in `metadata.custom_metadata["envbuild.entries_sha256"]` (the sha256 of the
canonical JSON of its `package` list); requirements.lock.txt in a last comment line (the sha256 of every
line above it), which pip ignores. A new lock format adds its seal/unseal pair here.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

from envbuild.errors import EnvbuildError, read_input_text
from envbuild.lock.condalock import LOCK_FILE, read_lock
from envbuild.lock.spec import render_spec

if TYPE_CHECKING:
    from envbuild.profile import Profile, Recipe

PIP_LOCK_FILE = "requirements.lock.txt"
LAYERS = ("conda", "pip")  # what a lock folder holds; `envbuild lock --only` and a backend pick among them
CONDA_SEAL_KEY = "envbuild.entries_sha256"
PIP_SEAL_PREFIX = "# sealed by envbuild lock: sha256:"


class StaleLock(EnvbuildError):
    """The lock does not match its profile (or was edited): exit 2 with the reasons and the fix."""


def conda_entries_digest(lock) -> str:
    """sha256 of a conda-lock v1 model's package entries (canonical JSON, so YAML layout does not matter)."""
    entries = [p.model_dump(mode="json") for p in lock.package]
    return hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()


def conda_entries_digest_of_text(text: str) -> str:
    """conda_entries_digest of a conda-lock.yml text `envbuild lock` just rendered."""
    import yaml
    from conda_lock.lockfile.v1.models import Lockfile as LockfileV1

    return conda_entries_digest(LockfileV1.model_validate(yaml.safe_load(text)))


def seal_pip_lock(text: str) -> str:
    """`text` with its seal line appended."""
    body = text if text.endswith("\n") else text + "\n"
    return f"{body}{PIP_SEAL_PREFIX}{hashlib.sha256(body.encode()).hexdigest()} (of the lines above)\n"


def _pip_seal_problem(text: str) -> Optional[str]:
    """None when the last line seals the lines above it, else why not."""
    body, _, last = text.rstrip("\n").rpartition("\n")
    if not last.startswith(PIP_SEAL_PREFIX):
        return "has no seal line (it was not written by `envbuild lock`, or its end was cut)"
    want = last[len(PIP_SEAL_PREFIX):].split()[0]
    got = hashlib.sha256((body + "\n").encode()).hexdigest()
    if got != want:
        return f"was edited after `envbuild lock` wrote it (seal {want[:12]} != its lines {got[:12]})"
    return None


def spec_hashes(profile: Profile, recipe: Recipe, layers: Sequence[str] = LAYERS) -> tuple:
    """(rendered spec files, content hash per platform) of what the profile asks for now.

    The content hashes only when `layers` holds the conda layer, else {}: only conda-lock.yml carries them,
    and conda-lock's code that computes them takes seconds to import (a pip-only lock or create waits for
    nothing it uses)."""
    files = render_spec(recipe, profile.name, profile_file=profile.path.name)
    if "conda" not in layers:
        return files, {}
    from envbuild.lock.condalock_interop import condalock_content_hashes

    return files, condalock_content_hashes(dict(files), recipe.platforms)  # conda-lock's own content hash


def stale_reasons(profile: Profile, recipe: Recipe, layers: Sequence[str] = LAYERS) -> List[str]:
    """Why the locks of `layers` in the profile's folder are not fresh for it; empty when fresh.

    A lock that cannot be parsed raises InputFileError naming its file and line (bad input, not staleness).
    """
    files, hashes = spec_hashes(profile, recipe, layers)
    folder = profile.directory
    reasons = _conda_reasons(folder, hashes) if "conda" in layers else []
    for fname in sorted(files):  # environment.yml, environment.<group>.yml, virtual-packages.yml
        path = folder / fname
        if not path.is_file() or read_input_text(path, "rendered spec") != files[fname]:
            reasons.append(f"{fname}: differs from the profile's [recipe]")
    return reasons + _pip_reasons(folder, bool(recipe.pip_requirements))


def _conda_reasons(folder: Path, hashes: Dict[str, str]) -> List[str]:
    lock_path = folder / LOCK_FILE
    if not lock_path.is_file():
        return [f"{LOCK_FILE} does not exist"]
    lock = read_lock(lock_path)
    have = dict(lock.metadata.content_hash)
    reasons = [f"{LOCK_FILE}: inputs for {p} changed (content hash {have.get(p, 'missing')[:12]} != {h[:12]})"
               for p, h in sorted(hashes.items()) if have.get(p) != h]
    reasons += [f"{LOCK_FILE}: platform {p} is no longer in the recipe" for p in sorted(set(have) - set(hashes))]
    seal, entries = (lock.metadata.custom_metadata or {}).get(CONDA_SEAL_KEY), conda_entries_digest(lock)
    if seal is None:
        reasons.append(f"{LOCK_FILE}: has no seal ({CONDA_SEAL_KEY}); it was not written by `envbuild lock`")
    elif seal != entries:
        reasons.append(f"{LOCK_FILE}: its package entries were edited after `envbuild lock` wrote them "
                       f"(seal {seal[:12]} != entries {entries[:12]})")
    return reasons


def _pip_reasons(folder: Path, wanted: bool) -> List[str]:
    path = folder / PIP_LOCK_FILE
    if wanted and not path.is_file():
        return [f"{PIP_LOCK_FILE} does not exist but the recipe has pip requirements"]
    if not wanted and path.is_file():
        return [f"{PIP_LOCK_FILE} exists but the recipe has no pip requirements"]
    problem = _pip_seal_problem(read_input_text(path, "pip lock")) if wanted else None
    return [f"{PIP_LOCK_FILE}: {problem}"] if problem else []


def require_fresh(profile: Profile, recipe: Recipe, layers: Sequence[str] = LAYERS) -> None:
    """Raise StaleLock (exit 2) naming the reasons and the fix when the profile's locks are not fresh."""
    reasons = stale_reasons(profile, recipe, layers)
    if reasons:
        raise StaleLock(f"the lock in {profile.directory} is stale against {profile.path}: {'; '.join(reasons)}; "
                        f"run {relock_command(profile.name, layers)}")


def relock_command(profile: str, layers: Sequence[str] = LAYERS) -> str:
    """The `envbuild lock` that makes the locks of `layers` fresh: `--only pip` when the conda layer is not
    wanted, since a full lock needs the conda channels, which a PyPI-only machine cannot reach."""
    only = " --only pip" if "conda" not in layers else ""
    return f"`envbuild lock --profile {profile}{only}`"
