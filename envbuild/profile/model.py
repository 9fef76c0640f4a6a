"""The profile model: what a reference image holds (components), how it is launched, and its build recipe.

A profile lives in lockfiles/<name>/profile.toml and is read by envbuild.profile.loader only. Every fact
carries its source and whether it was read from the image itself (`verified`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from envbuild.errors import InputFileError
from envbuild.profile.recipe import Recipe


@dataclass(frozen=True)
class Component:
    """One piece of the image's stack (torch, nccl, sglang, ...), pinned by version or by git commit."""

    name: str
    version: Optional[str]
    commit: Optional[str]
    source: str
    verified: bool
    pip_name: Optional[str] = None  # distribution name to look for in an env
    severity: str = "warn"  # how bad a mismatch is
    why: str = ""  # why a mismatch matters, shown next to the verdict
    notes: str = ""


@dataclass(frozen=True)
class LaunchVar:
    """An environment variable the image's launch sets (slime's actors, sglang, the example scripts)."""

    name: str
    value: str
    scope: str
    source: str
    verified: bool = False
    why: str = ""


@dataclass(frozen=True)
class DockerRun:
    """The `docker run` limits the image is documented with; a bare-metal node is compared with these."""

    shm_size_bytes: Optional[int]
    memlock: Optional[str]  # "unlimited" or bytes as a string
    stack_bytes: Optional[int]
    ipc: Optional[str]
    source: str


@dataclass
class Profile:
    name: str
    path: Path
    description: str
    image: str
    framework: str
    cuda: str
    cuda_major: int
    python: str
    components: Dict[str, Component]
    launch_env: Dict[str, LaunchVar]
    docker_run: Optional[DockerRun]
    patches: List[Dict[str, Any]] = field(default_factory=list)
    recipe: Optional[Recipe] = None  # None: a facts-only profile (e.g. from `capture --env`), nothing to build
    raw: Dict[str, Any] = field(default_factory=dict)

    @property
    def directory(self) -> Path:
        return self.path.parent

    def require_recipe(self) -> Recipe:
        """The recipe, for the commands that lock or build; a profile without one is bad input for them."""
        if self.recipe is None:
            raise InputFileError(self.path, "[recipe]: the profile has no [recipe] section; nothing to lock or build")
        return self.recipe
