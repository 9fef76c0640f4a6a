"""The phases of `envbuild create`, run in a staging prefix and swapped into place only at the end.

    fetch -> conda -> pip -> git -> builds -> doctor -> relocate -> activation -> manifest -> swap

Files that prebuilt, hash-locked wheels unpacked unchanged are neither relocated nor hashed again
(envbuild.install.prefix_files): the manifest takes their sha256 from the wheel's RECORD. A create whose
inputs an earlier one had rewrites only the files that one rewrote and writes its manifest rows
(envbuild.install.tree_cache).

The doctor's stack checks run before `relocate`: until then every path pip and the editable installs
wrote names the staging prefix, so the checks see this env's checkouts, not the previous env's at the
target. Each phase's result (what pip/git/builds installed) is kept in the state file for the manifest.

Each phase is recorded in the staging prefix's state file when it finishes, so a rerun after a crash or
SIGKILL resumes after the last finished phase (the state is keyed by the locks' hash: other locks, clean
start). Nothing touches the target before `swap`, which is one atomic exchange.

ENVBUILD_TEST_KILL_AT=<phase> makes the process SIGKILL itself after that phase's work and before the
state records it (for `swap`: right after the exchange, before the old env is removed), so tests can prove
that every interruption point leaves the old env intact and that a rerun finishes.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional

from envbuild.errors import EnvbuildError

PHASES = ("fetch", "conda", "pip", "git", "builds", "doctor", "relocate", "activation", "manifest", "swap")


def kill_point(phase: str) -> None:
    """Test hook: when ENVBUILD_TEST_KILL_AT names this phase, signal ourselves with
    ENVBUILD_TEST_KILL_SIGNAL (KILL, the default: die uncleanly; INT: a Ctrl-C)."""
    if os.environ.get("ENVBUILD_TEST_KILL_AT") == phase:
        sig = getattr(signal, "SIG" + os.environ.get("ENVBUILD_TEST_KILL_SIGNAL", "KILL").upper())
        os.kill(os.getpid(), sig)
        time.sleep(5)  # a catchable signal is delivered before this returns


@dataclass
class CreateJob:
    """Everything create needs, resolved before any work starts (so --dry-run can show it)."""

    profile: Any  # envbuild.profile.Profile
    recipe: Any  # envbuild.profile.Recipe
    target: Path
    platform: str
    backend: str  # a name in envbuild.install.backends.NAMES
    lock_files: Dict[str, Path]  # name -> path of each lock this env is built from
    conda: List[Any]  # LockedConda to install
    planned: List[Any]  # conda_layer.PlannedArchive
    pip_lock: Optional[Path] = None
    interpreter: Optional[Path] = None  # --backend venv: the --python it builds on
    git_mirror: Optional[Any] = None  # git_mirror.GitMirror (--git-mirror / ENVBUILD_GIT_MIRROR)
    bundle: Optional[Any] = None
    origins: List[Any] = field(default_factory=list)  # git_mirror.Origin of each git source built
    without: List[str] = field(default_factory=list)  # git sources left out (--without), with their builds
    problems: List[str] = field(default_factory=list)  # why this job cannot run (the plan shows them)
    backend_note: str = ""  # why this backend, when --backend was not given
    swapped: bool = False  # this run put its env at the target (an interruption after that keeps it)
    key: str = ""
    timings: Dict[str, float] = field(default_factory=dict)


def lock_key(lock_files: Dict[str, Path], recipe, without: List[str] = ()) -> str:
    """Hash of the locks and of the recipe parts no lock holds (git commits, patches, builds, activation, the
    git sources left out)."""
    h = hashlib.sha256()
    for name in sorted(lock_files):
        h.update(name.encode() + b"\0" + lock_files[name].read_bytes() + b"\0")
    extra = {"git": [g.__dict__ for g in recipe.git], "builds": [b.__dict__ for b in recipe.builds],
             "activation": recipe.activation.env}
    if without:
        extra["without"] = sorted(without)
    h.update(json.dumps(extra, sort_keys=True).encode())
    for g in recipe.git:
        for p in g.patches:
            patch = Path(recipe.profile_dir) / p
            h.update(patch.read_bytes() if patch.is_file() else b"missing:" + p.encode())
    return h.hexdigest()


def already_built(job: CreateJob) -> bool:
    """True when the target was built from exactly these locks (its manifest's lock key); then a leftover
    staging prefix of the same key is tidied away, because there is nothing left to resume."""
    from envbuild.install import manifest
    from envbuild.install.staging import Staging

    existing = manifest.read(job.target)
    if not existing or existing.get("lock_key") != job.key:
        return False
    Staging(job.target, job.key).tidy()
    return True


def run(job: CreateJob, ui) -> None:
    """Run (or resume) every phase. `ui` (create_ui.CreateUI) announces each phase. The manifest is not read
    back: the target's envbuild/manifest.json is what this run wrote (90,000 files' lines for a torch stack)."""
    from envbuild.install import activation, backends, conda_layer, manifest
    from envbuild.install.prefix_files import prebuilt_files, walk_files
    from envbuild.install import rerun_cache, tree_cache
    from envbuild.install.relocate import relocate_listed, relocate_tree
    from envbuild.install.staging import Staging

    staging = Staging(job.target, job.key)
    staging.acquire()
    try:
        done = staging.open()
        if done:
            ui.note(f"resuming in {staging.path}: done already: {', '.join(done)}")
        prefix = staging.path
        verified: Dict[str, Path] = {}
        layers: Dict[str, Any] = {}

        def phase(name: str, label: Optional[str], fn: Callable[..., Any], **counts: Any) -> Any:
            """Run pipeline phase `name` (skipped when a resumed run finished it) as the UI's phase `label`
            (None: nothing to do, nothing to announce); `fn` gets the UI phase to count its work on."""
            if name in staging.done():
                return staging.result(name)
            t0 = time.monotonic()
            if label is None:  # the recipe has nothing for this phase
                result = None
            else:
                with ui.phase(label, **counts) as ph:
                    result = fn(ph)
            kill_point(name)
            staging.mark_done(name, result if name in ("pip", "git", "builds") else None)
            job.timings[name] = time.monotonic() - t0
            return result

        def fetch(ph) -> None:
            ph.set_total(total=len(job.planned), total_bytes=conda_layer.planned_bytes(job.planned))
            verified.update(conda_layer.fetch_and_verify(job.planned, phase=ph))

        phase("fetch", f"fetch + verify {len(job.planned)} conda archives" if job.planned else None, fetch,
              unit="archives")
        if "conda" not in staging.done():
            if not verified and job.planned:  # resumed after fetch: re-verify from the cache (never trusted blind)
                with ui.phase(f"re-verify {len(job.planned)} cached conda archives", total=len(job.planned),
                              unit="archives") as ph:
                    verified.update(conda_layer.fetch_and_verify(job.planned, phase=ph))
            backend = backends.get(job.backend)

            def conda(ph) -> None:
                request = backends.BaseRequest(staging=prefix, target=job.target,
                                               archives=[verified[p.filename] for p in job.conda],
                                               python=job.profile.python, cache=conda_layer.cache_dir(),
                                               interpreter=job.interpreter)
                if backend.PER_PACKAGE_PROGRESS:
                    ph.set_total(total=len(request.archives))
                    backend.install(request, ph.advance)
                else:
                    backend.install(request)

            what = (f"link {len(job.conda)} conda packages" if backend.USES_CONDA_LOCK
                    else f"base env on {job.interpreter}")
            phase("conda", f"{what} ({job.backend})", conda, unit="packages")
        r = job.recipe
        layers["pip"] = phase("pip", "pip layer (uv, --require-hashes --no-deps)" if r.pip_requirements else None,
                              lambda ph: _pip_layer(job, prefix, ph))
        builds = [b for b in r.builds if b.git not in job.without]
        layers["git"] = phase("git", f"git sources ({len(job.origins)})" if job.origins else None,
                              lambda ph: _git_layer(job, prefix, ph), total=len(job.origins), unit="sources")
        layers["builds"] = phase("builds", f"source builds ({len(builds)}) via the wheelhouse cache" if builds
                                 else None, lambda ph: _build_layer(job, prefix, ph), total=len(builds),
                                 unit="builds")

        kept: Dict[str, Any] = {}

        def doctor(ph) -> None:
            from envbuild.install.doctor_gate import gate_inputs, run_stack_checks

            inputs = gate_inputs(prefix, job.target, job.profile, job.key, layers, job.interpreter)
            gate = run_stack_checks(prefix, job.profile, inputs)
            ph.result = ui.gate(gate)
            if not gate.ok:
                from envbuild.install.doctor_gate import DoctorGateFailed

                ids = ", ".join(r.check_id for r in gate.failed)
                raise DoctorGateFailed(f"the staged env fails the doctor's stack checks ({ids}); the env at "
                                       f"{job.target} was left as it was; the staged one stays in {prefix}")

        phase("doctor", "doctor stack checks on the staged env", doctor)
        tree_key, tree = None, None
        if tree_cache.usable(bool(done), layers):
            tree_key = rerun_cache.key_of(tree_cache.CACHE_KIND, tree_cache.tree_inputs(
                prefix, job.target, job.key, layers, job.interpreter))
            tree = tree_cache.get(tree_key)

        def verbatim() -> Dict[str, Any]:
            """What the prebuilt wheels unpacked as it was: neither relocated nor hashed again (prefix_files);
            worked out once, in the first phase that needs it (its seconds count there)."""
            if "files" not in kept:
                kept["files"] = prebuilt_files(prefix, layers["pip"] or [])
            return kept["files"]

        def relocate(ph) -> None:
            """One walk of the prefix, kept for the manifest (with what activation adds) when both phases
            run in this process, with the sha256 of each file relocation read whole and left as it was:
            walking a torch env's 90,000 files, and reading its 55 MB of scripts and dist-info files, are
            each a noticeable part of a warm create."""
            if tree is not None:
                n = relocate_listed(prefix, prefix, job.target, tree.rewritten)
                kept["rewritten"] = tree.rewritten
                ph.result = f"{n} files rewritten, the ones an earlier create with the same inputs rewrote"
                return
            files, digests, rewritten = list(walk_files(prefix)), {}, []
            relocate_tree(prefix, prefix, job.target, verbatim=verbatim(), files=files, digests=digests,
                          rewritten=rewritten)
            kept["walked"], kept["read"], kept["rewritten"] = files, digests, rewritten

        def write_activation(ph) -> None:
            written = activation.write_scripts(prefix, job.target, job.profile.name, job.profile.cuda,
                                               job.recipe.activation.env)
            if "walked" in kept:
                kept["walked"] = _with_files(kept["walked"], prefix, written.values())
                for path in written.values():  # rewritten: hashed by the manifest
                    kept["read"].pop(path.relative_to(prefix).as_posix(), None)

        phase("relocate", f"relocate paths to {job.target}", relocate)
        phase("activation", "activation scripts", write_activation)

        def write_manifest(ph) -> None:
            layered = {k: v for k, v in layers.items() if v}
            if tree is not None:  # the kept rows, when envbuild's own files (activation) hash as they did
                own = [row for _, _, row in manifest.file_rows(prefix, files=manifest.own_files(prefix))]
                if own == tree.own_rows:
                    manifest.write(prefix, manifest.render(prefix, job.target, job.profile.name, job.key, job.conda,
                                                           layers=layered, rows_text=tree.rows_text))
                    ph.result = "rows kept from an earlier create with the same inputs"
                    return
            # rows for the tree cache, filled as written (relocation ran in this process: it is not a resumed run)
            keep: Optional[List[Any]] = [] if tree_key else None
            own_rows: List[str] = []
            # listed before the manifest's own temporary file appears in the prefix
            files = kept["walked"] if "walked" in kept else list(walk_files(prefix))

            def listed() -> Iterable[str]:
                for _, who, row in manifest.file_rows(prefix, ph.advance, verbatim(), files, kept.get("read")):
                    if keep is not None:
                        keep.append(row)
                        if who == "envbuild":
                            own_rows.append(row)
                    yield row
            manifest.write(prefix, manifest.render(prefix, job.target, job.profile.name, job.key, job.conda,
                                                   layers=layered, rows=listed()))
            if keep is not None:
                tree_cache.put(tree_key, kept["rewritten"], own_rows, keep)

        phase("manifest", "manifest: hash the installed files", write_manifest)

        t0 = time.monotonic()
        def swapped() -> None:  # the new env is at the target from here on, whatever stops us next
            job.swapped = True
            kill_point("swap")

        with ui.phase(f"swap into {job.target}"):
            staging.swap(kill_hook=swapped)
            job.swapped = True
        job.timings["swap"] = time.monotonic() - t0
    finally:
        staging.release()


def _with_files(files: List[Any], prefix: Path, paths: Iterable[Path]) -> List[Any]:
    """`files` (walk_files' listing of `prefix`) with `paths` written since: each one's directory entry
    replaces any it had in the listing."""
    added = {}
    for path in paths:
        with os.scandir(path.parent) as it:
            for entry in it:
                if entry.name == path.name:
                    added[Path(path).relative_to(prefix).as_posix()] = entry
    return [(rel, e) for rel, e in files if rel not in added] + list(added.items())


def _layer_module(name: str):
    import importlib

    try:
        return importlib.import_module(f"envbuild.install.{name}")
    except ImportError as exc:
        raise EnvbuildError(f"the recipe needs envbuild.install.{name}, which cannot be imported: {exc}") from exc


def _pip_layer(job: CreateJob, prefix: Path, ph) -> Any:
    """The pip layer through envbuild.install.pip_layer.install_locked (--require-hashes --no-deps)."""
    if job.pip_lock is None:
        raise EnvbuildError(f"{job.profile.name}: the recipe has pip requirements but there is no pip lock; "
                            f"run `envbuild lock --profile {job.profile.name}`")
    mod = _layer_module("pip_layer")
    wheelhouse = getattr(job.bundle, "wheel_dir", None)
    installed = mod.install_locked(prefix / "bin" / "python", job.pip_lock,
                                   find_links=[wheelhouse] if wheelhouse else [],
                                   indexes={} if job.bundle else {i.name: i.url for i in job.recipe.pip.indexes},
                                   offline=job.bundle is not None, phase=ph)
    ph.result = f"{len(installed)} wheels"
    return [dict(w.__dict__) for w in installed]


def _git_layer(job: CreateJob, prefix: Path, ph) -> Any:
    """Checkouts at their commits with patches (envbuild.install.git_sources) from where resolve located them
    (the site's mirror, the bundle, the recipe's URL), their submodules, editable ones pip-installed."""
    mod = _layer_module("git_sources")
    out = []
    for origin in job.origins:
        src = job.recipe.git_source(origin.name)
        dest = prefix / "src" / src.name
        ph.detail(f"git {src.name} @ {src.commit[:12]} from {origin.url} ({len(src.patches)} patch(es))")
        mod.fetch_source(src, dest, job.recipe.profile_dir, origin=origin.url)
        subs = origin.submodules
        if src.submodules and not subs:  # a remote origin: its .gitmodules is known only now
            from envbuild.install.git_mirror import locate_submodules_of_checkout

            subs = locate_submodules_of_checkout(dest, origin, src.submodules, job.git_mirror, src.sparse)
        for sub in subs:
            path = sub.name.split("/", 1)[1]
            folders = src.sparse.get(path, [])
            ph.detail(f"git {src.name}: submodule {path} @ {sub.commit[:12]} from {sub.url}"
                      + (f" (sparse: {', '.join(folders)})" if folders else ""))
            mod.checkout_submodule(dest, path, sub.url, sub.commit, folders)
        if src.install == "editable":
            _editable_install(prefix, src.name, dest / src.subdir)
        ph.advance()
        ph.log(f"{src.name} @ {src.commit[:12]} from {origin.via} {origin.url}, {len(src.patches)} patch(es), "
               f"{len(subs)} submodule(s), install {src.install}")
        out.append({"name": src.name, "url": src.url, "commit": src.commit, "patches": list(src.patches),
                    "install": src.install, "path": f"src/{src.name}", "fetched_from": origin.url,
                    "via": origin.via, "submodules": {s.name.split("/", 1)[1]: s.commit for s in subs},
                    "sparse": {p: list(f) for p, f in src.sparse.items()}})
    return out


def in_env(prefix: Path) -> Dict[str, str]:
    """The environment a command runs with inside the env being built, as if it were activated: its bin/
    first on PATH (build scripts run `python3 -m pybind11`, `cmake`, `ninja` by name), VIRTUAL_ENV set,
    and none of the user's pip configuration (PIP_* variables, pip.conf: envbuild.lock.pip_lock)."""
    from envbuild.lock.pip_lock import isolated_pip_env

    env = isolated_pip_env()
    env["PATH"] = os.pathsep.join([str(prefix / "bin"), env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(prefix)
    env.pop("PYTHONHOME", None)
    return env


def _editable_install(prefix: Path, name: str, path: Path) -> None:
    """`pip install -e` of a checkout into the env; its whole output kept in <prefix>/envbuild/logs/."""
    import subprocess

    logs = prefix / "envbuild" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"git-{name}.log"
    with open(log, "w", encoding="utf-8") as fh:
        proc = subprocess.run([str(prefix / "bin" / "python"), "-m", "pip", "install", "--no-deps",
                               "--no-build-isolation", "--no-index", "-e", str(path)],
                              stdout=fh, stderr=subprocess.STDOUT, text=True, env=in_env(prefix))
    if proc.returncode != 0:
        from envbuild.install.buildlog import cause

        raise EnvbuildError(f"git source {name}: editable install failed (pip exited {proc.returncode}: "
                            f"{cause(log.read_text(encoding='utf-8', errors='replace'))}); full log: {log}")


def _build_layer(job: CreateJob, prefix: Path, ph) -> Any:
    mod = _layer_module("source_builds")
    return mod.install_source_builds(prefix=prefix, recipe=job.recipe, bundle=job.bundle, phase=ph,
                                     without=job.without)
