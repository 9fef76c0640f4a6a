"""What the two NCCL probes (comm.nccl_collectives, comm.nccl_churn) share: their run deadlines by mode and the
`comm.phase_deadline_s` option, declared once so both checks take the same key the same way (the registry refuses
two different declarations of one key)."""
from __future__ import annotations

from typing import Dict

from envbuild.doctor.registry import Option

DEADLINE_S = {"quick": 120.0, "full": 300.0}
PHASE_DEADLINE = Option("comm.phase_deadline_s", "int", 60,
                        "the longest a rank may stay in one phase before it counts as hung (init: at least 90)",
                        low=1, high=86400)


def phase_deadlines(seconds: int) -> Dict[str, float]:
    """NCCL init may take long on a cold node; any other phase is one collective or one rebuild."""
    return {"init": max(90.0, float(seconds)), "*": float(seconds)}
