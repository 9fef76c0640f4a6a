"""sglang and Megatron: the commits the image patches, and whether slime's patches are applied."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Tuple

from envbuild.doctor.registry import Option, check, verdict
from envbuild.doctor.verdict import mismatch_status
from envbuild.facts import stack_view as sv
from envbuild.facts.source import FactUnavailable
from envbuild.report.model import Result, Status


def _stack_with_patches(ctx) -> Tuple[Dict[str, Any], str]:
    """The probe's facts; with `--set stack.patch_dir=DIR` (a slime checkout) on a live node, re-run the
    probe with the profile's patches so `git apply --reverse --check` tells which are applied."""
    patch_dir = ctx.option("stack.patch_dir")
    if not patch_dir:
        return ctx.facts.stack(), "patch state not checked: pass --set stack.patch_dir=<slime checkout>"
    if not ctx.facts.is_live:
        return ctx.facts.stack(), "patch state not checked: --set stack.patch_dir needs the live env, not a bundle"
    if "stack_patched" not in ctx.cache:
        from envbuild.doctor.stack_reader import read_stack
        from envbuild.facts.stack import patch_specs

        ctx.cache["stack_patched"] = read_stack(ctx.python or "", patches=patch_specs(ctx.profile, Path(patch_dir)))
    return ctx.cache["stack_patched"], f"patches from {patch_dir}"


@check("stack.checkouts", "stack", "sglang and Megatron are the image's commits with slime's patches applied",
       needs=("profile",), causes=("M4",),
       options=(Option("stack.patch_dir", "str", "", "a slime checkout: check which of its patches are applied "
                                                     "(live env only)"),))
def checkouts(ctx) -> Result:
    """slime's patches change sglang's weight update and Megatron's process-group reload (the paths where
    slime #1305 fails); another commit or an unpatched checkout runs different code there."""
    stack, patch_note = _stack_with_patches(ctx)
    prof = ctx.profile
    rows: List[Dict[str, Any]] = []
    problems: List[str] = []
    notes: List[str] = []
    worst = Status.PASS
    for key in ("sglang", "megatron"):
        comp = prof.components.get(key)
        if comp is None:
            continue
        src = sv.source_package(stack, key, comp.pip_name or key)
        git, commit, version = src.git, src.commit, src.version
        row = {"component": key, "image_commit": comp.commit, "image_version": comp.version, "commit": commit,
               "version": version, "checkout": git.get("root"), "dirty_files": git.get("changed_files"),
               "patches": git.get("patches")}
        rows.append(row)
        if not src.pkg and not src.dist:
            notes.append(f"{key} is not installed")
            continue
        if comp.commit and commit and not sv.commit_matches(comp.commit, commit):
            problems.append(f"{key} is at {commit[:12]}, the image at {comp.commit}")
            worst = max(worst, mismatch_status(comp.severity), key=lambda s: s.rank)
        elif comp.commit and not commit:
            if comp.version and version and not sv.version_matches(comp.version, version):
                problems.append(f"{key} {version} differs from the image's {comp.version}")
                worst = max(worst, mismatch_status(comp.severity), key=lambda s: s.rank)
            else:
                notes.append(f"{key} {version or ''} is not a git checkout; its commit cannot be compared with "
                             f"{comp.commit}")
                worst = max(worst, Status.WARN, key=lambda s: s.rank)
        for p in git.get("patches") or []:
            if p["state"] != "applied":
                problems.append(f"slime patch {p['file']} is {p['state']} in {git.get('root')}")
                worst = max(worst, Status.FAIL, key=lambda s: s.rank)
    if not [r for r in rows if r["commit"] or r["version"]]:
        raise FactUnavailable("neither sglang nor Megatron is installed in this env")
    evidence = {"rows": rows, "patches": patch_note, "profile_patches": prof.patches}
    if worst == Status.PASS:
        return verdict(Status.PASS,
                      "sglang/Megatron at the image's commits" + (f"; {'; '.join(notes)}" if notes else "")
                      + f" ({patch_note})", evidence=evidence)
    return verdict(worst, "; ".join(problems + notes),
                  evidence=evidence, causes=["M4"],
                  remediation="check out the profile's commits and apply slime's docker/patch/<version>/*.patch "
                              "(git apply), as the image's Dockerfile does")
