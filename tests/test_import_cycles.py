"""No import circle between the project's modules.

import-linter's contracts here are all ``forbidden`` (which package may import which); its
``acyclic_siblings`` contract checks sibling *packages*, which is stricter than a circle between
modules (``tltsim.scenario`` and ``tltsim.rl`` import each other's modules without any module
circle). So this test builds the import graph with grimp (what import-linter itself uses), local
imports included, and fails naming every circle between modules: a circle works only while its
modules happen to be imported in one order, and it hides which module is the more basic.
"""

from __future__ import annotations

import grimp

PACKAGES = ("tltcore", "tltsim", "tltreal", "tltcli", "analysis")

#: Imports that close a known circle in a file another engineer owns, removed from the graph until
#: that file changes (each names its owner). Empty once they are gone.
KNOWN_CIRCLES: tuple[tuple[str, str], ...] = ()


def circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(root: str) -> None:  # iterative: the graph is deeper than Python's recursion limit allows
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return out


def project_graph() -> grimp.ImportGraph:
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    for importer, imported in KNOWN_CIRCLES:
        graph.remove_import(importer=importer, imported=imported)
    return graph


def test_no_module_imports_itself_through_others():
    found = circles(project_graph())
    assert not found, "import circles: " + "; ".join(
        " <-> ".join(c) for c in found)


def test_the_check_finds_a_circle():
    """The check itself fails on a circle: one import added back from build to a module that
    imports it closes one."""
    graph = project_graph()
    graph.add_import(importer="tltcore.errors", imported="tltcore.config")
    assert any("tltcore.errors" in c and "tltcore.config" in c for c in circles(graph))
