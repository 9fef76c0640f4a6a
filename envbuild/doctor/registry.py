"""The check registry: every check is declared once, with what it needs and which causes it can confirm.

Check modules live in envbuild/doctor/checks/ and register themselves with @check(...). They are
discovered by walking that package, so adding a check never means editing a shared list.
"""
from __future__ import annotations

import fnmatch
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple, Union

if TYPE_CHECKING:  # pragma: no cover
    from envbuild.doctor.context import DoctorContext
    from envbuild.report.model import Result

CATEGORIES = ("node", "stack", "gpu", "comm", "train")


def category_rank(category: str) -> int:
    """Position of a category in every listing and report (node facts first, the train step last); an unknown
    category sorts after the known ones."""
    return CATEGORIES.index(category) if category in CATEGORIES else len(CATEGORIES)


# What a check can need. The runner skips (with the reason) a check whose needs the run cannot meet.
NEEDS = frozenset({"gpu", "multi_gpu", "profile", "live"})

CheckFn = Callable[["DoctorContext"], Union["Result", List["Result"]]]


@dataclass(frozen=True)
class Check:
    id: str
    category: str
    title: str
    fn: CheckFn
    needs: FrozenSet[str] = frozenset()
    timeout_s: float = 30.0
    causes: Tuple[str, ...] = ()
    modes: FrozenSet[str] = frozenset({"static", "quick", "full"})  # doctor modes that run it
    doc: str = ""


_REGISTRY: Dict[str, Check] = {}
_DISCOVERED = False


def check(
    id: str,
    category: str,
    title: str,
    needs: Iterable[str] = (),
    timeout_s: float = 30.0,
    causes: Sequence[str] = (),
    modes: Iterable[str] = ("static", "quick", "full"),
) -> Callable[[CheckFn], CheckFn]:
    """Register a check function. `causes` are ids in envbuild/knowledge that the check can point to."""
    if category not in CATEGORIES:
        raise ValueError(f"check {id}: unknown category {category!r}")
    unknown = set(needs) - NEEDS
    if unknown:
        raise ValueError(f"check {id}: unknown needs {sorted(unknown)}")

    def wrap(fn: CheckFn) -> CheckFn:
        if id in _REGISTRY and _REGISTRY[id].fn is not fn:
            raise ValueError(f"check id {id} registered twice")
        _REGISTRY[id] = Check(
            id=id,
            category=category,
            title=title,
            fn=fn,
            needs=frozenset(needs),
            timeout_s=timeout_s,
            causes=tuple(causes),
            modes=frozenset(modes),
            doc=(fn.__doc__ or "").strip(),
        )
        return fn

    return wrap


def discover() -> Dict[str, Check]:
    """Import every module under envbuild.doctor.checks once, so their @check decorators run."""
    global _DISCOVERED
    if not _DISCOVERED:
        import envbuild.doctor.checks as pkg

        for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
            importlib.import_module(f"{pkg.__name__}.{info.name}")
        _DISCOVERED = True
    return dict(_REGISTRY)


def all_checks() -> List[Check]:
    """Every registered check, in category order then id order."""
    checks = discover().values()
    return sorted(checks, key=lambda c: (category_rank(c.category), c.id))


def select(patterns: Sequence[str] = (), skip: Sequence[str] = (), mode: Optional[str] = "static") -> List[Check]:
    """Checks matching any of `patterns` (ids or globs; all when empty), minus `skip`, that run in `mode`
    (every mode when `mode` is None, as `--list` shows).

    An explicit pattern that matches nothing is a usage error: a typo must not silently run zero checks.
    """
    from envbuild.errors import EnvbuildError

    def matches(c: Check, pats: Sequence[str]) -> bool:
        return any(fnmatch.fnmatchcase(c.id, p) or c.category == p for p in pats)

    checks = all_checks()
    for pat in list(patterns) + list(skip):
        if not any(matches(c, (pat,)) for c in checks):
            known = ", ".join(c.id for c in checks)
            raise EnvbuildError(f"no check matches {pat!r}; known checks: {known}")

    chosen = [c for c in checks if (not patterns or matches(c, patterns)) and not matches(c, skip)]
    if not patterns and mode is not None:  # an explicit --check runs a check whatever the mode
        chosen = [c for c in chosen if mode in c.modes]
    return chosen
