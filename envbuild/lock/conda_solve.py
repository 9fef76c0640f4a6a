"""Solve the recipe's conda layer with py-rattler, one platform at a time, with explicit virtual packages.

Main specs and every optional group are solved together (one consistent environment), then each package is
put in the category of the first request that reaches it: `main` if a main spec needs it, else the optional
group's name. This mirrors conda-lock's categories, so `conda-lock render -e compat` works on the result.

When the solve fails, the error names the spec that asked for the missing package: rattler's message names
package names, so each requested spec is queried on its own to find which has no candidates at all.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from envbuild.errors import EnvbuildError
from envbuild.profile.recipe import Recipe
from envbuild.lock.spec import virtual_packages


class SolveError(EnvbuildError):
    """The conda layer cannot be solved: names the spec and the channels that were searched."""


@dataclass
class SolvedPackage:
    record: object  # rattler.RepoDataRecord
    category: str


def _vpkgs(recipe: Recipe, platform: str):
    from rattler import BuildString, GenericVirtualPackage, PackageName, Version

    return [GenericVirtualPackage(PackageName(n), Version(v), BuildString("0"))
            for n, v in sorted(virtual_packages(recipe, platform).items())]


def requested_specs(recipe: Recipe) -> List[Tuple[str, str]]:
    """(spec, category) in request order: main specs first, then optional groups by name."""
    out = [(s, "main") for s in recipe.conda.specs]
    for group in sorted(recipe.conda.optional):
        out += [(s, group) for s in recipe.conda.optional[group]]
    return out


def solve_platform(recipe: Recipe, platform: str, spec_where: Dict[str, str] = None) -> List[SolvedPackage]:
    """Solve one platform; raises SolveError naming the failing spec (and where it is written).

    The error is raised only after the event loop is gone: rattler's Gateway must not outlive the loop
    in a traceback, or its worker threads can crash the interpreter at exit.
    """
    import gc

    ok, value = asyncio.run(_solve(recipe, platform, spec_where or {}))
    gc.collect()
    if not ok:
        raise SolveError(value)
    return value


async def _solve(recipe: Recipe, platform: str, spec_where: Dict[str, str]):
    from rattler import Gateway, solve
    from rattler.exceptions import SolverError

    requests = requested_specs(recipe)
    gateway = Gateway()
    subdirs = [platform, "noarch"]
    try:
        records = await solve(sources=list(recipe.conda.channels), specs=[s for s, _ in requests], gateway=gateway,
                              platforms=subdirs, virtual_packages=_vpkgs(recipe, platform))
    except SolverError as exc:
        return False, await _explain(gateway, recipe, platform, requests, str(exc), spec_where)
    except Exception as exc:  # channel unreachable, bad repodata: say which channel list was used
        return False, (f"{platform}: cannot read channels {', '.join(recipe.conda.channels)}: "
                       f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    finally:
        del gateway
    return True, categorize(records, requests)


async def _explain(gateway, recipe: Recipe, platform: str, requests: Sequence[Tuple[str, str]], message: str,
                   spec_where: Dict[str, str]) -> str:
    """Find the requested specs that match nothing in the channels; fall back to rattler's explanation."""
    missing = []
    for spec, _ in requests:
        try:
            found = await gateway.query(list(recipe.conda.channels), [platform, "noarch"], [spec], recursive=False)
            count = sum(len(list(per_channel)) for per_channel in found)
        except Exception:
            count = -1
        if count == 0:
            where = spec_where.get(spec, "")
            missing.append(f"spec {spec!r}{' (' + where + ')' if where else ''} matches no package")
    head = f"{platform}: cannot solve the conda layer"
    detail = "; ".join(missing) if missing else "conflicting requirements"
    solver = "\n  ".join(line for line in message.splitlines() if line.strip())
    return f"{head}: {detail} in channels {', '.join(recipe.conda.channels)}\n  {solver}"


def categorize(records: list, requests: Sequence[Tuple[str, str]]) -> List[SolvedPackage]:
    """Category of each record: the first (main before optional) request whose dependency closure holds it."""
    from rattler import MatchSpec

    by_name = {r.name.normalized: r for r in records}
    category: Dict[str, str] = {}
    for spec, cat in requests:
        todo = [MatchSpec(spec).name.normalized]
        while todo:
            name = todo.pop()
            if name in category or name not in by_name:
                continue
            category[name] = cat
            todo += [MatchSpec(d).name.normalized for d in by_name[name].depends]
    return [SolvedPackage(r, category.get(r.name.normalized, "main")) for r in records]
