"""Render the environment spec (environment.yml + virtual-packages.yml) from a recipe with jinja2.

The rendered spec is the lock's *input*: its sha256 per platform is the conda-lock `content_hash`, so
`envbuild lock --check` knows a lock is stale exactly when what the profile asks for changed, not when a
channel gained a newer build. The files are also conda-lock's own input formats, so a user with conda-lock
and a conda binary can re-solve the same request without envbuild.
"""
from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Dict, List

from envbuild.profile.recipe import Recipe

if TYPE_CHECKING:
    import jinja2

ENV_SPEC = "environment.yml"
VPKG_SPEC = "virtual-packages.yml"

# conda-lock's defaults for linux (conda_lock/default-virtual-packages.yaml) minus __cuda: a CUDA version is
# only assumed when the recipe says so, because a wrong __cuda silently picks CPU or wrong-driver builds.
_LINUX_DEFAULTS = {"__unix": "0", "__linux": "5.10", "__glibc": "2.28"}


def virtual_packages(recipe: Recipe, platform: str) -> Dict[str, str]:
    """name -> version of the virtual packages the solve for `platform` assumes (recipe wins over defaults)."""
    out: Dict[str, str] = dict(_LINUX_DEFAULTS) if platform.startswith("linux") else {}
    if platform.startswith("linux"):
        out["__archspec"] = "1"
    for v in recipe.virtual_packages:
        name, _, rest = v.partition("=")
        out[name] = rest.partition("=")[0] or "0"
    return out


def template_env() -> jinja2.Environment:
    """The one jinja2 setup for templates/ (spec files and activation scripts): StrictUndefined, so a
    variable a template names but the caller forgot fails at render time, not in a user's shell."""
    import jinja2

    from envbuild.paths import templates_dir

    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, autoescape=False)


def group_spec_name(group: str) -> str:
    """File of an optional conda group: conda-lock takes one category per environment file."""
    return f"environment.{group}.yml"


def render_spec(recipe: Recipe, name: str, profile_file: str = "profile.toml") -> Dict[str, str]:
    """filename -> text of the rendered environment spec files: environment.yml (category main, with the
    pip layer), one environment.<group>.yml per optional group (conda-lock's `category:` key; a
    `# [category=...]` comment would be read by conda-lock as a platform selector and drop the package),
    and virtual-packages.yml."""
    env = template_env()
    common = dict(name=name, profile_file=profile_file, platforms=recipe.platforms)
    groups = sorted(recipe.conda.optional)
    files = " ".join(["-f environment.yml"] + [f"-f {group_spec_name(g)}" for g in groups])
    template = env.get_template("environment.yml.j2")
    out = {ENV_SPEC: _end_nl(template.render(
        channels=recipe.conda.channels, specs=recipe.conda.specs, category="main", conda_lock_files=files,
        pip_requirements=recipe.pip_requirements, pip_indexes=recipe.pip.indexes,
        pip_exclude_newer=getattr(recipe.pip, "exclude_newer", ""), **common))}
    for g in groups:
        out[group_spec_name(g)] = _end_nl(template.render(
            channels=recipe.conda.channels, specs=recipe.conda.optional[g], category=g, conda_lock_files=files,
            pip_requirements=[], pip_indexes=[], pip_exclude_newer="", **common))
    out[VPKG_SPEC] = _end_nl(env.get_template("virtual-packages.yml.j2").render(
        virtual_packages=_union_vpkgs(recipe), **common))
    return out


def _union_vpkgs(recipe: Recipe) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for p in recipe.platforms:
        out.update(virtual_packages(recipe, p))
    return out


def _end_nl(text: str) -> str:
    return text.rstrip("\n") + "\n"


def content_hash(spec_files: Dict[str, str], platform: str, extra: List[str] = ()) -> str:
    """sha256 of everything a platform's lock depends on: the rendered spec files, the platform, extras."""
    h = hashlib.sha256()
    for fname in sorted(spec_files):
        h.update(fname.encode() + b"\0" + spec_files[fname].encode() + b"\0")
    h.update(platform.encode())
    for e in extra:
        h.update(b"\0" + e.encode())
    return h.hexdigest()
