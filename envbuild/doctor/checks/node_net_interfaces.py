"""node.net_interfaces: every network interface or RDMA device the launch environment names for NCCL, Gloo or
TensorPipe exists on this node and is up.

NCCL's bootstrap (the TCP exchange every communicator starts with, one GPU included) uses the interfaces
NCCL_SOCKET_IFNAME selects: a value that selects none ends every NCCL init with "Bootstrap : no socket interface
found", which each GPU probe would otherwise blame on its own causes. The rules are NCCL's (docs env.html,
NCCL_SOCKET_IFNAME and NCCL_IB_HCA): a comma list of prefixes; a leading `^` excludes what the list matches; a
leading `=` (after `^` when both) makes every entry an exact name; NCCL_IB_HCA entries may end in `:port`.
Gloo's GLOO_SOCKET_IFNAME and TensorPipe's TP_SOCKET_IFNAME take exact names (torch docs, distributed.html,
"Choosing the network interface to use").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.report.model import Result, Status

CAT = "node"
NCCL_ENV_DOC = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
TORCH_IFNAME_DOC = "https://pytorch.org/docs/stable/distributed.html#choosing-the-network-interface-to-use"
IFF_UP = 0x1  # linux/if.h: the interface is administratively up
DOWN_OPERSTATES = ("down", "lowerlayerdown", "notpresent")  # RFC 2863 states of /sys/class/net/*/operstate

# What each variable names, and whose matching rules apply: "nccl" (prefixes, ^, =, :port) or "exact" (names).
SOCKET_VARS: Tuple[Tuple[str, str], ...] = (("NCCL_SOCKET_IFNAME", "nccl"), ("GLOO_SOCKET_IFNAME", "exact"),
                                            ("TP_SOCKET_IFNAME", "exact"))
HCA_VARS: Tuple[Tuple[str, str], ...] = (("NCCL_IB_HCA", "nccl"),)

# Error texts a run's other failures show when these variables select nothing (doctor/fold.py folds a
# failure whose text matches them under this check): NCCL's bootstrap and init calls as torch and the stack
# probe report them, Gloo's device lookup, NCCL's IB transport.
EXPLAINS = {
    "NCCL_SOCKET_IFNAME": [r"[Bb]ootstrap", r"no socket interface", r"ncclGetUniqueId", r"ncclCommInitRank",
                           r"NCCL error", r"nccl(?:Internal|InvalidUsage|System|Remote)Error", r"DistBackendError",
                           r"ProcessGroupNCCL"],
    "GLOO_SOCKET_IFNAME": [r"[Gg]loo", r"Unable to find address", r"getifaddrs"],
    "TP_SOCKET_IFNAME": [r"[Tt]ensor[Pp]ipe"],
    "NCCL_IB_HCA": [r"NET/IB", r"ibv_", r"No IB device", r"IB device"],
}


@dataclass(frozen=True)
class Selector:
    """One variable's value as NCCL parses it: `exclude` (^), `exact` (=) and its (name, port) entries."""

    exclude: bool
    exact: bool
    entries: Tuple[Tuple[str, Optional[int]], ...]

    def matches(self, name: str, port: Optional[int] = None) -> bool:
        """Whether any entry selects `name` (and `port`, for an HCA); an exclusion list's caller negates this."""
        return any(self.entry_matches(entry, name, port) for entry in self.entries)

    def entry_matches(self, entry: Tuple[str, Optional[int]], name: str, port: Optional[int] = None) -> bool:
        want, want_port = entry
        named = name == want if self.exact else name.startswith(want)
        return named and (want_port is None or port is None or want_port == port)

    def selects(self, name: str, port: Optional[int] = None) -> bool:
        return self.matches(name, port) != self.exclude


def parse_selector(value: str, rules: str) -> Selector:
    """NCCL's parse of a list (`^` then `=` at the start, `,` between entries, `:port` after an HCA); "exact"
    rules (Gloo, TensorPipe) take each entry as a whole name."""
    text = value.strip()
    if rules != "nccl":
        return Selector(False, True, tuple((e.strip(), None) for e in text.split(",") if e.strip()))
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    entries: List[Tuple[str, Optional[int]]] = []
    for raw in text.split(","):
        name, _, port = raw.strip().partition(":")
        if name:
            entries.append((name, int(port) if port.strip().isdigit() else None))
    return Selector(exclude, exact, tuple(entries))


def _read(ctx, path: str) -> str:
    return (F.read_optional(ctx.facts, path) or "").strip()


def net_interfaces(ctx) -> Dict[str, Dict[str, Any]]:
    """name -> {up, operstate, flags} from /sys/class/net (read through the fact source)."""
    out: Dict[str, Dict[str, Any]] = {}
    for name in F.listdir_optional(ctx.facts, "/sys/class/net") or []:
        operstate = _read(ctx, f"/sys/class/net/{name}/operstate") or "unknown"
        try:
            flags = int(_read(ctx, f"/sys/class/net/{name}/flags") or "0", 16)
        except ValueError:
            flags = 0
        # "unknown" is what lo and many virtual interfaces report while they carry traffic: IFF_UP decides then
        out[name] = {"up": bool(flags & IFF_UP) and operstate not in DOWN_OPERSTATES, "operstate": operstate,
                     "flags": hex(flags)}
    return out


def rdma_ports(ctx) -> Dict[str, Dict[int, Dict[str, Any]]]:
    """hca -> port -> {up, state, phys_state} from /sys/class/infiniband ({} without RDMA devices)."""
    out: Dict[str, Dict[int, Dict[str, Any]]] = {}
    for hca in F.listdir_optional(ctx.facts, "/sys/class/infiniband") or []:
        ports: Dict[int, Dict[str, Any]] = {}
        for port in F.listdir_optional(ctx.facts, f"/sys/class/infiniband/{hca}/ports") or []:
            if not port.isdigit():
                continue
            base = f"/sys/class/infiniband/{hca}/ports/{port}"
            state, phys = _read(ctx, f"{base}/state"), _read(ctx, f"{base}/phys_state")
            ports[int(port)] = {"up": "ACTIVE" in state.upper(), "state": state, "phys_state": phys}
        out[hca] = ports
    return out


Finding = Tuple[Status, str]


def _judge_sockets(var: str, value: str, rules: str, ifaces: Dict[str, Dict[str, Any]]) -> List[Finding]:
    sel = parse_selector(value, rules)
    have = ", ".join(sorted(ifaces)) or "none"
    chosen = [n for n in sorted(ifaces) if sel.selects(n)]
    up = [n for n in chosen if ifaces[n]["up"]]
    who = {"NCCL_SOCKET_IFNAME": "NCCL's bootstrap finds no socket interface, so every NCCL communicator "
                                 "fails to initialise (one GPU included)",
           "GLOO_SOCKET_IFNAME": "every Gloo process group fails to create its device",
           "TP_SOCKET_IFNAME": "TensorPipe RPC cannot bind"}[var]
    if not chosen:
        return [(Status.FAIL, f"{var}={value} selects no network interface on this node (it has {have}): {who}")]
    if not up:
        states = ", ".join(f"{n} {ifaces[n]['operstate']}" for n in chosen)
        return [(Status.FAIL, f"{var}={value} selects only interfaces that are down ({states}): {who}")]
    out: List[Finding] = []
    if not sel.exclude:
        unmatched = [e for e in sel.entries if not any(sel.entry_matches(e, n) for n in ifaces)]
        if unmatched:
            out.append((Status.WARN, f"{var}={value}: {', '.join(e[0] for e in unmatched)} matches no interface "
                        f"(used: {', '.join(up)})"))
        down = [n for n in chosen if not ifaces[n]["up"]]
        if down:
            out.append((Status.WARN, f"{var}={value} also selects {', '.join(down)}, which is down"))
    return out


def _judge_hcas(var: str, value: str, rules: str, hcas: Dict[str, Dict[int, Dict[str, Any]]]) -> List[Finding]:
    sel = parse_selector(value, rules)
    if not hcas:
        return [(Status.WARN, f"{var}={value} but this node has no RDMA device (/sys/class/infiniband is empty "
                 "or absent): NCCL uses TCP sockets between nodes")]
    chosen = [(h, p) for h in sorted(hcas) for p in sorted(hcas[h]) if sel.selects(h, p)]
    have = ", ".join(f"{h}:{p}" for h in sorted(hcas) for p in sorted(hcas[h])) or ", ".join(sorted(hcas))
    fallback = "NCCL finds no IB device and falls back to TCP sockets between nodes"
    if not chosen:
        return [(Status.FAIL, f"{var}={value} selects no RDMA port on this node (it has {have}): {fallback}")]
    active = [(h, p) for h, p in chosen if hcas[h][p]["up"]]
    if not active:
        states = ", ".join(f"{h}:{p} {hcas[h][p]['state'] or '?'}" for h, p in chosen)
        return [(Status.FAIL, f"{var}={value} selects only ports that are not ACTIVE ({states}): {fallback}")]
    if not sel.exclude:
        unmatched = [e for e in sel.entries if not any(sel.entry_matches(e, h, p) for h in hcas for p in hcas[h])]
        if unmatched:
            return [(Status.WARN, f"{var}={value}: {', '.join(e[0] for e in unmatched)} matches no RDMA port")]
    return []


@check("node.net_interfaces", CAT, "interfaces and RDMA devices named by NCCL_SOCKET_IFNAME, NCCL_IB_HCA, "
       "GLOO_SOCKET_IFNAME, TP_SOCKET_IFNAME exist and are up", causes=("U4", "C4"))
def net_interfaces_check(ctx) -> Result:
    """A launch shell that names an interface this node lacks (copied from another cluster, a renamed NIC)
    breaks NCCL's bootstrap on one GPU too; every GPU probe then fails with an NCCL init error. Judged with
    NCCL's own matching rules, so `^docker` or `=eth0` mean here what they mean to NCCL."""
    env = F.self_environ(ctx.facts)
    named = {var: (env[var], rules) for var, rules in SOCKET_VARS + HCA_VARS if env.get(var, "").strip()}
    if not named:
        return verdict(Status.PASS, "no NCCL_SOCKET_IFNAME, NCCL_IB_HCA, GLOO_SOCKET_IFNAME or TP_SOCKET_IFNAME "
                       "set: the libraries choose their interfaces")
    ifaces = net_interfaces(ctx) if any(v in named for v, _ in SOCKET_VARS) else {}
    hcas = rdma_ports(ctx) if any(v in named for v, _ in HCA_VARS) else {}
    found: List[Tuple[str, Status, str]] = []
    for var, (value, rules) in named.items():
        judged = (_judge_hcas(var, value, rules, hcas) if var in dict(HCA_VARS)
                  else _judge_sockets(var, value, rules, ifaces))
        found += [(var, s, t) for s, t in judged]
    ev: Dict[str, Any] = {"variables": {v: val for v, (val, _) in named.items()}, "interfaces": ifaces,
                          "rdma": {h: {str(p): st for p, st in ports.items()} for h, ports in hcas.items()},
                          "findings": [{"variable": v, "status": s.value, "finding": t} for v, s, t in found],
                          "sources": [NCCL_ENV_DOC, TORCH_IFNAME_DOC]}
    if not found:
        return verdict(Status.PASS, "; ".join(f"{v}={val}" for v, (val, _) in named.items()) +
                       ": every name selects an interface that is up", evidence=ev)
    worst = max((s for _, s, _ in found), key=lambda s: s.rank)
    failing = [v for v, s, _ in found if s == Status.FAIL]
    if failing:  # what the run's other failures show because of it (doctor/fold.py)
        ev["explains"] = [p for v in dict.fromkeys(failing) for p in EXPLAINS[v]]
    texts = [t for _, s, t in sorted(found, key=lambda f: -f[1].rank)]
    have = ", ".join(sorted(ifaces)) if ifaces else None
    fix = ("unset the variable, or name an interface this node has" + (f" ({have})" if have else "") +
           "; NCCL: a prefix (eth), an exact name (=eth0), an exclusion (^docker,lo); check with `ip -br link` and "
           "`ibv_devinfo`")
    return verdict(worst, texts[0] + (f" (+{len(texts) - 1} more)" if len(texts) > 1 else ""), evidence=ev,
                  causes=["U4", "C4"], remediation=fix)
