"""The import graph of envbuild: back-edges between layers and cycles between modules (issue 10's layering).

Every `import envbuild...` / `from envbuild... import` in a module counts, at the top or inside a function
(a lazy import is still a dependency). A back-edge is an import from a package into one of a higher layer
(LAYERS; the data flow of DESIGN.md, low to high); a cycle is a strongly connected set of modules.
Run as `python tests/importgraph.py [ROOT]` to print the numbers; tests/test_import_graph.py holds them at 0.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Dict, List, Set, Tuple

# Layer of each top-level part of envbuild; an import may only go to the same package or a lower layer.
# Inputs as data (the profile, the causes, the train arithmetic) sit under the facts read against them; the
# result model and its renderers under the doctor that fills them.
LAYERS = {
    "errors": 0, "fsutil": 0, "paths": 0, "hashing": 0, "tomlcompat": 0, "__init__": 0,
    # stdlib-only helpers every layer may call: output paths, CLI argument checks, redaction, child processes,
    # temporaries left by killed runs, shared-cache locks, downloads, the live progress of long commands
    "outputs": 0, "cliargs": 0, "redact": 0, "children": 0, "leftovers": 0, "cachelock": 0, "downloads": 0,
    "progress": 0, "envvalues": 0,
    "profile": 1, "train": 1,
    "facts": 2, "report": 2, "knowledge": 2,
    "lock": 3, "doctor": 3,
    "install": 4, "pack": 4, "explain": 4, "fleet": 4,
    "commands": 5,
    "cli": 6, "__main__": 6,
}


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
