"""torch as the environment under test sees it: importable, its CUDA build, its cuDNN, vs the profile."""
from __future__ import annotations

from envbuild.doctor.registry import check, verdict
from envbuild.doctor.signatures import causes_in_text
from envbuild.facts import stack_view as sv
from envbuild.report.model import Result, Status


@check("stack.torch", "stack", "torch imports, is a CUDA build, and CUDA/NCCL initialise", causes=("C6", "C10"))
def torch_present(ctx) -> Result:
    """The env's torch must be a CUDA build whose CUDA and NCCL initialise; a failure here names the cause
    the probe's error text matches (a stub libcuda, 803/804, an old driver)."""
    stack = ctx.facts.stack()
    t = sv.require_torch(stack)
    init = stack.get("init") or {}
    evidence = {k: t.get(k) for k in ("version", "cuda", "cuda_tag", "nccl_version", "cudnn_version",
                                       "cuda_available", "device_count", "arch_list", "file")}
    evidence["init"] = init
    if t.get("cuda_tag") == "cpu" or not t.get("cuda"):
        no_gpu = ctx.nvml_unavailable_reason()
        if no_gpu is not None and not ctx.require_gpu:
            return verdict(Status.SKIP,
                          f"torch {t.get('version')} is a CPU-only build and this node has no usable GPU driver "
                          f"({no_gpu}); pass --python/--prefix of the GPU environment on a GPU node",
                          evidence=evidence)
        return verdict(Status.FAIL,
                      f"torch {t.get('version')} is a CPU-only build: no CUDA, no NCCL",
                      evidence=evidence, causes=["C6"],
                      remediation="install the CUDA build of torch from the profile's index "
                                  "(e.g. --index-url https://download.pytorch.org/whl/cu129)")
    err = (stack.get("errors") or {}).get("init")
    if err:
        evidence["init_error"] = err
        return verdict(Status.FAIL,
                      f"torch {t['version']} could not initialise CUDA/NCCL: {err.splitlines()[0][:200]}",
                      evidence=evidence, causes=causes_in_text(err) or ["C1", "D9"],
                      remediation="see the stack.libcuda_* and stack.cuda_runtime_driver results for the library "
                                  "that was loaded; re-run with NCCL_DEBUG=INFO for the failing call")
    what = f"torch {t['version']} (CUDA {t['cuda']}, NCCL {t.get('nccl_version') or '?'}, cuDNN {t.get('cudnn_version') or '?'})"
    if t.get("cuda_available"):
        what += f"; {t.get('device_count')} GPU(s) visible; " + (
            "CUDA tensor and a 1-rank NCCL group initialised" if init.get("nccl_group") else "CUDA initialised")
    else:
        what += "; no GPU visible, so CUDA and NCCL were not initialised (libraries are those `import torch` maps)"
    return verdict(Status.PASS, what, evidence=evidence)


@check("stack.torch_cuda_tag", "stack", "torch version and CUDA build equal the profile's", needs=("profile",),
       causes=("C6", "C10"))
def torch_cuda_tag(ctx) -> Result:
    """A torch of another CUDA major needs another driver (C6); another minor resolves other runtime
    libraries than the image (C10); another torch changes the ABI every extension was built against."""
    stack = ctx.facts.stack()
    t = sv.require_torch(stack)
    prof = ctx.profile
    comp = prof.components.get("torch")
    want_torch = comp.version if comp else None
    evidence = {"torch": t.get("version"), "torch.version.cuda": t.get("cuda"), "profile_torch": want_torch,
                "profile_cuda": prof.cuda, "source": comp.source if comp else None}
    have_cuda = sv.major_minor(t.get("cuda"))
    want_cuda = sv.major_minor(prof.cuda)
    if have_cuda is None:
        return verdict(Status.FAIL,
                      f"torch {t.get('version')} is a CPU-only build; the image runs {want_torch} (CUDA {prof.cuda})",
                      evidence=evidence, causes=["C6"],
                      remediation=f"install torch=={want_torch} from the cu{want_cuda[0]}{want_cuda[1]} index")
    if have_cuda and want_cuda and have_cuda[0] != want_cuda[0]:
        return verdict(Status.FAIL,
                      f"torch is built for CUDA {t.get('cuda')}, the image for CUDA {prof.cuda}: another CUDA major "
                      f"needs another driver and mixes cu{have_cuda[0]} with cu{want_cuda[0]} wheels",
                      evidence=evidence, causes=["C6"],
                      remediation=f"install torch=={want_torch} from the cu{want_cuda[0]}{want_cuda[1]} index")
    if have_cuda and want_cuda and have_cuda != want_cuda:
        return verdict(Status.FAIL,
                      f"torch is built for CUDA {t.get('cuda')}, the image for CUDA {prof.cuda}: the runtime "
                      "libraries resolve to another minor version than the image's",
                      evidence=evidence, causes=["C10"],
                      remediation=f"install torch=={want_torch} (CUDA {prof.cuda})")
    if want_torch and not sv.version_matches(want_torch, t.get("version")):
        status = Status.FAIL if comp.severity == "fail" else Status.WARN
        return verdict(status,
                      f"torch {t.get('version')} differs from the image's {want_torch}: {comp.why}",
                      evidence=evidence, causes=["C9"], remediation=f"install torch=={want_torch}")
    return verdict(Status.PASS,
                  f"torch {t.get('version')} (CUDA {t.get('cuda')}) as in {prof.name}", evidence=evidence)


@check("stack.cudnn_version", "stack", "cuDNN torch loads equals the profile's", needs=("profile",), causes=("C9",))
def cudnn_version(ctx) -> Result:
    """cuDNN changes kernels and numerics; slime's conda recipe and its image differ here (9.16 vs 9.19)."""
    stack = ctx.facts.stack()
    t = sv.require_torch(stack)
    comp = ctx.profile.components.get("cudnn")
    if comp is None or not comp.version:
        return verdict(Status.SKIP, f"profile {ctx.profile.name} pins no cuDNN version")
    seen = {}
    if t.get("cudnn_version"):
        seen["torch.backends.cudnn.version()"] = t["cudnn_version"]
    for m in sv.main_library(sv.mapped(stack, "libcudnn"), "libcudnn.so"):
        if m.get("api_version"):
            seen[f"mapped {m['path']}"] = m["api_version"]
    d = sv.dist(stack, comp.pip_name or "nvidia-cudnn-cu12")
    if d:
        seen[f"pip {d['name']}"] = d["version"]
    evidence = {"profile": comp.version, "seen": seen, "source": comp.source}
    if not seen:
        return verdict(Status.SKIP, "torch reports no cuDNN and no libcudnn is mapped",
                      evidence=evidence)
    bad = {k: v for k, v in seen.items() if not sv.version_matches(comp.version, v)}
    if bad:
        status = Status.FAIL if comp.severity == "fail" else Status.WARN
        where = "; ".join(f"{k} = {v}" for k, v in bad.items())
        return verdict(status,
                      f"cuDNN differs from the image's {comp.version} ({where}): {comp.why}",
                      evidence=evidence, causes=["C9"],
                      remediation=f"pip install {comp.pip_name or 'nvidia-cudnn-cu12'}=={comp.version}")
    return verdict(Status.PASS,
                  f"cuDNN {next(iter(seen.values()))} as in {ctx.profile.name}", evidence=evidence)
