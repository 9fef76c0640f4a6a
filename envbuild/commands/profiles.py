"""`envbuild profiles [show NAME]`: the reference-image profiles this envbuild knows.

Profiles are found like every other command finds them (envbuild.profile.store: --lockfiles, then
$ENVBUILD_LOCKFILES, then envbuild's lockfiles/). In a pipe the list is the full names, one per line, so
`for p in $(envbuild profiles)` works; on a terminal it is a table that never cuts a name, then one line
per profile saying which locks it has and what builds from them on this machine (envbuild.install.buildable),
which `profiles show` also prints with the exact `create` command.
"""
from __future__ import annotations

import sys

import click

from envbuild import cmdoptions


@click.group("profiles", invoke_without_command=True)
@cmdoptions.lockfiles
@click.pass_context
def profiles(ctx: click.Context, lockfiles) -> int:
    """List the reference-image profiles (<lockfiles>/<name>/profile.toml) and what builds here.

    \b
    Examples:
      envbuild profiles
      envbuild profiles show slime-v0.3.1-cu130
    """
    ctx.obj = {"lockfiles": lockfiles}
    if ctx.invoked_subcommand is not None:
        return 0
    from rich.console import Console
    from rich.table import Table

    from envbuild.install.buildable import assess
    from envbuild.profile import load_profile, lockfiles_base, profile_names

    base = lockfiles_base(lockfiles)
    names = profile_names(base)
    if not sys.stdout.isatty():
        for name in names:
            click.echo(name)
        return 0
    table = Table(show_header=True, header_style="bold")
    table.add_column("profile", no_wrap=True, overflow="fold")
    for col in ("image", "CUDA", "python", "torch", "NCCL", "description"):
        table.add_column(col)
    loaded = [load_profile(name, base) for name in names]
    for p in loaded:
        comp = p.components
        table.add_row(p.name, p.image, p.cuda, p.python,
                      comp["torch"].version if "torch" in comp else "-",
                      comp["nccl"].version if "nccl" in comp else "-", p.description)
    console = Console(highlight=False)
    console.print(table)
    console.print("On this machine (the locks each profile has; what `envbuild create` builds from them here):",
                  soft_wrap=True)
    for p in loaded:
        console.print(assess(p).line(), soft_wrap=True, markup=False)
    return 0


@profiles.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the profile as JSON.")
@cmdoptions.lockfiles
@click.pass_context
def show(ctx: click.Context, name: str, as_json: bool, lockfiles) -> int:
    """Print one profile: its locks and what builds from them here, every component with its source and
    whether it was read from the image."""
    import json

    from rich.console import Console
    from rich.table import Table

    from envbuild.install.buildable import assess
    from envbuild.profile import load_profile

    p = load_profile(name, lockfiles or (ctx.obj or {}).get("lockfiles"))
    if as_json:
        click.echo(json.dumps(p.raw, indent=2, sort_keys=True))
        return 0
    console = Console(highlight=False)
    console.print(f"[bold]{p.name}[/bold]  {p.description}\nimage {p.image} · CUDA {p.cuda} · python {p.python}"
                  f" · {p.path}")
    here = assess(p)
    console.print(f"on this machine: {here.line().split(': ', 1)[1]}", soft_wrap=True, markup=False)
    for command in here.create_commands():
        console.print(f"build it here: {command} --prefix DIR", soft_wrap=True, markup=False)
    table = Table(show_header=True, header_style="bold", title="components")
    for col in ("component", "pin", "verified", "source"):
        table.add_column(col)
    for c in p.components.values():
        pin = c.version or ""
        if c.commit:
            pin = f"{pin} @{c.commit}".strip()
        table.add_row(c.name, pin, "yes" if c.verified else "[yellow]no[/yellow]", c.source)
    console.print(table)
    if p.launch_env:
        env = Table(show_header=True, header_style="bold", title="launch environment")
        for col in ("variable", "value", "scope", "source"):
            env.add_column(col)
        for v in p.launch_env.values():
            env.add_row(v.name, v.value, v.scope, v.source)
        console.print(env)
    if p.docker_run:
        d = p.docker_run
        console.print(f"docker run: shm {d.shm_size_bytes} B · memlock {d.memlock} · stack {d.stack_bytes} B"
                      f" · ipc={d.ipc}  ({d.source})")
    return 0
