"""The environment-variable policy of the env's launch shell, against the image's launch environment.

Ray workers inherit the shell that ran `ray start`; a container starts clean. So the variables here are
what slime's actors will see unless slime overrides them (envbuild/knowledge/causes.toml C4, C5, M3)."""
from __future__ import annotations

import re
from typing import Any, Dict, List, Tuple

from envbuild.doctor.registry import check, verdict
from envbuild.facts import stack_view as sv
from envbuild.redact import REDACTED, VALUE_ALLOWLIST
from envbuild.report.model import Result, Status

# Informational variables set by NVIDIA base images; not NCCL/CUDA knobs.
_INFORMATIONAL = {"NCCL_VERSION", "CUDA_VERSION", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
                  "CUDA_MODULE_LOADING", "CUDA_DRIVER_VERSION", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"}

# Values this check judges besides the audit's allowlist: library paths, named in its findings
_SHOWN = VALUE_ALLOWLIST | {"CUDA_DEVICE_MAX_CONNECTIONS", "SGLANG_NCCL_SO_PATH", "VLLM_NCCL_SO_PATH"}

Finding = Tuple[Status, str, List[str]]


def shown(env: Dict[str, str]) -> Dict[str, str]:
    """The variables as a report may show them: values only for the names the audit keeps (NCCL_IB_* may hold host
    names, a NCCL_*-prefixed variable may be a site's secret), the same rule as the actor audit (envbuild.fleet.audit)."""
    return {k: (v if k in _SHOWN else REDACTED) for k, v in env.items()}


def _findings(env: Dict[str, str], profile, stack: Dict[str, Any], origin=lambda k: "the launch shell") -> List[Finding]:
    out: List[Finding] = []
    env = shown(env)
    launch = profile.launch_env if profile is not None else {}
    cumem = env.get("NCCL_CUMEM_ENABLE")
    want_cumem = launch["NCCL_CUMEM_ENABLE"].value if "NCCL_CUMEM_ENABLE" in launch else "0"
    if cumem is not None and cumem != want_cumem:
        out.append((Status.FAIL if profile is not None else Status.WARN,
                    f"NCCL_CUMEM_ENABLE={cumem} in {origin('NCCL_CUMEM_ENABLE')}: slime's training actors inherit it (it is "
                    f"overridable since slime #839) while sglang forces {want_cumem}, so the weight-sync communicator "
                    "mixes cuMem and legacy IPC", ["C5", "C4"]))
    nvls = env.get("NCCL_NVLS_ENABLE")
    if nvls is not None and nvls not in ("0",):
        out.append((Status.WARN, f"NCCL_NVLS_ENABLE={nvls}: NVLS multicast objects are re-created at every "
                    "communicator rebuild; the image's scripts run with 0 in effect", ["N1", "C4"]))
    for var in ("CUDA_DEVICE_MAX_CONNECTIONS",):
        if var in env and var in launch and env[var] != launch[var].value:
            out.append((Status.WARN, f"{var}={env[var]} differs from the image's launch ({launch[var].value})", ["C4"]))
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        if "expandable_segments:true" in env.get(var, "").replace(" ", "").lower():
            out.append((Status.WARN, f"{var}={env[var]}: CUDA IPC of expandable segments needs pidfd_getfd "
                        "(ptrace rights) and breaks weight sync between trainer and rollout", ["M3", "O3"]))
    pre = env.get("LD_PRELOAD", "")
    if pre:
        if "torch_memory_saver" in pre:
            out.append((Status.WARN, f"LD_PRELOAD={pre} in {origin('LD_PRELOAD')}: slime preloads the torch_memory_saver hook only "
                        "into training actors; shell-wide it puts rollout and IPC'd memory on VMM", ["M3", "C4"]))
        elif "vgpu" in pre.lower():
            out.append((Status.WARN, f"LD_PRELOAD={pre}: a GPU-sharing interposer intercepts driver calls", ["D8"]))
        else:
            out.append((Status.WARN, f"LD_PRELOAD={pre} in {origin('LD_PRELOAD')}; the image sets none", ["C4"]))
    tms = sorted(k for k in env if k.startswith("TMS_"))
    if tms:
        out.append((Status.WARN, f"{', '.join(tms)} set for every process ({', '.join(sorted({origin(k) for k in tms}))}): slime sets them per training actor with "
                    "--offload-train", ["C4", "M3"]))
    torch_mm = sv.major_minor(sv.torch_info(stack).get("cuda"))
    for d in [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]:
        parts = d.split("/")
        if "stubs" in parts:
            out.append((Status.WARN, f"LD_LIBRARY_PATH has the stubs directory {d}: a stub libcuda there shadows the "
                        "driver", ["C7", "C4"]))
        elif "compat" in parts or "cuda-compat" in d:
            out.append((Status.WARN, f"LD_LIBRARY_PATH has the forward-compat directory {d}: its libcuda replaces "
                        "the host driver's user-mode library", ["C8", "C1"]))
        else:
            m = re.search(r"cuda-(\d+)\.(\d+)", d)
            if m and torch_mm and (int(m.group(1)), int(m.group(2))) != torch_mm:
                out.append((Status.WARN, f"LD_LIBRARY_PATH has {d}, a CUDA {m.group(1)}.{m.group(2)} directory, ahead "
                            f"of torch's CUDA {torch_mm[0]}.{torch_mm[1]} libraries", ["C4", "C10"]))
    nccl_mapped = {m.get("realpath") for m in sv.mapped(stack, "libnccl")}
    for var in ("SGLANG_NCCL_SO_PATH", "VLLM_NCCL_SO_PATH"):
        if var in env and nccl_mapped and env[var] not in nccl_mapped and \
                not any(env[var] == m.get("path") for m in sv.mapped(stack, "libnccl")):
            out.append((Status.WARN, f"{var}={env[var]} is not the libnccl torch maps ({', '.join(sorted(nccl_mapped))})",
                        ["C3"]))
    extra = sorted(k for k in env if k.startswith("NCCL_") and k not in launch and k not in _INFORMATIONAL
                   and k not in ("NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE"))
    if extra:
        out.append((Status.WARN, "NCCL knobs set that the image does not set: "
                    + ", ".join(f"{k}={env[k]} (in {origin(k)})" for k in extra), ["C4"]))
    return out


@check("stack.env_policy", "stack", "NCCL_*/CUDA_*/PYTORCH_*/LD_*/TMS_* variables follow the image's launch policy",
       causes=("C4", "C5", "M3"))
def env_policy(ctx) -> Result:
    """Flags variables that make a bare-metal launch differ from the image's: NCCL_CUMEM_ENABLE against
    sglang's 0 (C5), expandable segments with CUDA IPC (M3), stubs/compat/other-CUDA library paths (C4)."""
    stack = ctx.facts.stack()
    env = stack.get("env") or {}
    found = _findings(env, ctx.profile, stack, ctx.env_origin)
    evidence = {"env": shown(env), "origins": {k: ctx.env_origin(k) for k in sorted(env)}, "findings": [{"status": s.value, "finding": t, "causes": c} for s, t, c in found]}
    if ctx.profile is not None:
        evidence["image_launch_env"] = {k: v.value for k, v in ctx.profile.launch_env.items()}
    if not found:
        note = "" if ctx.profile is not None else " (pass --profile to compare with an image's launch environment)"
        return verdict(Status.PASS,
                      f"{len(env)} policy variables set, none against the launch policy{note}", evidence=evidence)
    worst = max((s for s, _, _ in found), key=lambda s: s.rank)
    causes: List[str] = []
    for s, _, cs in found:
        if s == worst:
            causes += [c for c in cs if c not in causes]
    texts = [t for s, t, _ in sorted(found, key=lambda f: -f[0].rank)]
    summary = texts[0] + (f" (+{len(texts) - 1} more)" if len(texts) > 1 else "")
    return verdict(worst, summary, evidence=evidence, causes=causes,
                  remediation="start Ray from a clean environment (env -i wrapper or an explicit runtime_env) with the "
                              "image's variables: " + (", ".join(f"{k}={v.value}" for k, v in
                                                                  ctx.profile.launch_env.items())
                                                        if ctx.profile else "NCCL_CUMEM_ENABLE=0 NCCL_NVLS_ENABLE=0"))
