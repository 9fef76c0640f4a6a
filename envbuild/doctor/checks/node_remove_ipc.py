"""node.remove_ipc: systemd-logind's RemoveIPC must not delete a user's shared memory at logout.

Causes (envbuild/knowledge/causes.toml, with their sources): O1 (/dev/shm and RemoveIPC).
"""
from __future__ import annotations

from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.facts import node_parse as P
from envbuild.report.model import Result, Status

CAT = "node"


@check("node.remove_ipc", CAT, "systemd-logind RemoveIPC does not delete a user's shared memory at logout",
       causes=("O1",))
def remove_ipc(ctx) -> Result:
    """logind's RemoveIPC=yes (systemd's default) removes a regular user's /dev/shm segments and SysV IPC when
    their last session ends: a job started from ssh and left running loses NCCL's segments."""
    files = ["/etc/systemd/logind.conf"]
    for d in ("/usr/lib/systemd/logind.conf.d", "/etc/systemd/logind.conf.d", "/run/systemd/logind.conf.d"):
        files += [f"{d}/{n}" for n in sorted(F.listdir_optional(ctx.facts, d) or []) if n.endswith(".conf")]
    texts = [(f, t) for f in files for t in [F.read_optional(ctx.facts, f)] if t is not None]
    value, where = P.parse_logind_remove_ipc(texts)
    status = F.self_status(ctx.facts)
    user = F.uid(status)
    has_logind = bool(texts) or F.listdir_optional(ctx.facts, "/run/systemd/system") is not None
    ev = {"files_read": [f for f, _ in texts], "RemoveIPC": value, "set_in": where, "uid": user}
    if not has_logind:
        return verdict(Status.PASS, "no systemd-logind configuration: RemoveIPC does not apply", evidence=ev)
    effective = True if value is None else value
    if not effective:
        return verdict(Status.PASS, f"RemoveIPC=no ({where})", evidence=ev)
    origin = f"set in {where}" if where else "systemd's default"
    if user is not None and user < 1000:
        return verdict(Status.PASS,
                      f"RemoveIPC=yes ({origin}) but this runs as system uid {user}, which logind leaves alone",
                      evidence=ev)
    return verdict(Status.WARN,
                  f"RemoveIPC=yes ({origin}): logging out removes uid {user}'s /dev/shm segments under running jobs",
                  evidence=ev, causes=["O1"],
                  remediation="set RemoveIPC=no in /etc/systemd/logind.conf.d/ (then systemctl restart systemd-logind), "
                              "or keep a session open (loginctl enable-linger)")
