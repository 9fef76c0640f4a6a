"""Which root causes an error text points to: the exact log signatures of envbuild/knowledge/causes.toml found
in it. Diagnosis belongs to the doctor, not to the facts it reads (facts/ only reports what is there)."""
from __future__ import annotations

from typing import List


def causes_in_text(text: str) -> List[str]:
    """Cause ids whose exact log signatures occur in `text` (an error the probe recorded)."""
    from envbuild.knowledge import load_causes

    found = []
    for cause in load_causes().values():
        if any(sig and sig in text for sig in cause.signatures):
            found.append(cause.id)
    return found
