""""Did you mean" for a misspelt name (a check id, a `--set` key): the closest known names, not all of them.

Why: a list of 60 check ids or 40 option keys buries the one the user meant; difflib's ratio finds a one-letter
typo or a swapped pair (as `git` and pip's "did you mean" do), and the message points to the command that lists
everything.
"""
from __future__ import annotations

import difflib
from typing import Iterable


def did_you_mean(word: str, known: Iterable[str], listing: str) -> str:
    """'did you mean a or b? (LISTING lists them all)', or just the listing when nothing is close."""
    close = difflib.get_close_matches(word, list(known), n=3, cutoff=0.7)
    if close:  # only the names about as close as the closest: "train.layer" is train.layers, not also train.lr
        best = difflib.SequenceMatcher(None, word, close[0]).ratio()
        close = [c for c in close if difflib.SequenceMatcher(None, word, c).ratio() >= best - 0.05]
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return f"{hint}({listing} lists them all)"
