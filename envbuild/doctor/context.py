"""What a check gets to work with: the fact source, the profile, the mode and the user's options."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from envbuild.facts.source import FactHung, FactSource, FactUnavailable

if TYPE_CHECKING:  # pragma: no cover
    from envbuild.profile import Profile


@dataclass
class DoctorContext:
    facts: FactSource
    profile: Optional["Profile"] = None
    mode: str = "static"  # static | quick | full
    gpus: Optional[List[int]] = None  # --gpus; None = every GPU NVML reports
    python: Optional[str] = None  # python of the environment under test
    require_gpu: bool = False
    options: Dict[str, Any] = field(default_factory=dict)  # the user's --set values, typed (registry.validate_options)
    cache: Dict[str, Any] = field(default_factory=dict)  # facts computed once and shared by checks
    # where a variable of this process's environment came from, when not the launch shell (a Ray job's
    # runtime_env): {name: "the job's runtime_env"}; checks name the origin so the fix goes to the right place
    env_origins: Dict[str, str] = field(default_factory=dict)

    def env_origin(self, name: str) -> str:
        return self.env_origins.get(name, "the launch shell")

    def gpu_indices(self) -> List[int]:
        """GPUs this run may use: --gpus, else all that NVML reports; [] when no driver is reachable."""
        try:
            count = int(self.facts.nvml().get("device_count", 0))
        except FactUnavailable:
            return []
        every = list(range(count))
        if self.gpus is None:
            return every
        return [g for g in self.gpus if g in every]

    def option(self, key: str) -> Any:
        """The typed value of a declared `--set` option: the user's value (parsed and bounded once, before the run),
        else the option's default. An undeclared key is a bug in the check (KeyError)."""
        from envbuild.doctor.registry import declared_options

        opt = declared_options()[key][0]
        return self.options[key] if key in self.options else opt.default

    def nvml_hung(self) -> bool:
        """Whether NVML's snapshot got no answer by its deadline: a wedged driver, not a missing one."""
        try:
            self.facts.nvml()
        except FactHung:
            return True
        except FactUnavailable:
            pass
        return False

    def nvml_unavailable_reason(self) -> Optional[str]:
        """Why NVML cannot be read here (no driver, a bundle without it), or None: the skip reason of GPU checks."""
        try:
            self.facts.nvml()
            return None
        except FactUnavailable as exc:
            return str(exc)
