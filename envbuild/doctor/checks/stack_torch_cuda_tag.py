"""stack.torch_cuda_tag: torch's version and CUDA build equal the profile's (C6, C10)."""
from __future__ import annotations

from envbuild.doctor.registry import check, verdict
from envbuild.doctor.verdict import mismatch_status
from envbuild.facts import stack_view as sv
from envbuild.report.model import Result, Status


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
        status = mismatch_status(comp.severity)
        return verdict(status,
                      f"torch {t.get('version')} differs from the image's {want_torch}: {comp.why}",
                      evidence=evidence, causes=["C9"], remediation=f"install torch=={want_torch}")
    return verdict(Status.PASS,
                  f"torch {t.get('version')} (CUDA {t.get('cuda')}) as in {prof.name}", evidence=evidence)
