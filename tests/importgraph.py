"""The import graph of envbuild: back-edges between layers and cycles between modules (issue 10's layering).

Every `import envbuild...` / `from envbuild... import` in a module counts, at the top or inside a function
(a lazy import is still a dependency). Every top-level part of envbuild (a package such as doctor/, or a module
such as outputs.py) is a layer of its own, in the order of LAYERS, low to high; a back-edge is an import from a
part into a higher one. Why one layer per part: two packages that shared a layer could import each other and no
back-edge would show it (knowledge <-> report hid that way). A cycle is a strongly connected set of modules.
Run as `python tests/importgraph.py [ROOT]` to print the numbers; tests/test_import_graph.py holds them.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Dict, List, Set, Tuple

# Low to high: an import may only go to the same part or one listed before it.
ORDER = [
    # stdlib-only helpers: errors, hashing, paths, atomic files, redaction, the live progress of long commands, child
    # processes, temporaries left by killed runs, shared-cache locks, downloads, output paths, CLI usage rules,
    # "did you mean", the shared option pieces
    "__init__", "tomlcompat", "fsutil", "errors", "hashing", "paths", "redact", "envvalues", "progress", "children", "leftovers",
    "cachelock", "downloads", "outputs", "cliargs", "suggest", "cmdoptions",
    # inputs as data (the train arithmetic, the profile, the causes) under the facts read against them; the result
    # model and its renderers under the doctor that fills them
    "train", "profile", "knowledge", "facts", "report", "lock", "doctor",
    "explain", "fleet", "record", "install", "pack",
    "commands", "cli", "__main__",
]
LAYERS = {name: rank for rank, name in enumerate(ORDER)}


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def graph(root: Path) -> Dict[str, Set[str]]:
    """module -> the envbuild modules it imports (a `from pkg import name` of a submodule counts as that module)."""
    mods = {module_name(root, p): p for p in (root / "envbuild").rglob("*.py")}
    edges: Dict[str, Set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: List[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for t in targets:
                if t in mods and t != mod:
                    edges[mod].add(t)
    return edges


def part(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def package_edges(pairs: List[Tuple[str, str]]) -> List[Tuple[str, str]]:
    """The distinct (package, package) pairs of module-level edges."""
    return sorted({(part(a), part(b)) for a, b in pairs})


def back_edges(edges: Dict[str, Set[str]]) -> List[Tuple[str, str]]:
    return sorted((a, b) for a, bs in edges.items() for b in bs
                  if part(a) != part(b) and LAYERS.get(part(b), 9) > LAYERS.get(part(a), 9))


def cycles(edges: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    out: List[List[str]] = []
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
    g = graph(root)
    be, cy = back_edges(g), cycles(g)
    print(f"{sum(len(v) for v in g.values())} imports between {len(g)} modules; "
          f"{len(be)} back-edge(s) between modules ({len(package_edges(be))} between packages), {len(cy)} cycle(s)")
    for a, b in be:
        print(f"  back-edge {a} -> {b}")
    for c in cy:
        print("  cycle " + " <-> ".join(c))
