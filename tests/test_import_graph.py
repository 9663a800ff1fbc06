"""bench's packages import each other one way only: a cycle (results <->
measure, progress <-> benchmark, conformance <-> framing) ties modules that
should stand alone, and once a lazy import hides one, a module's import
order decides whether bench starts. The graph is read from the source with
ast, every import counted (a function's own too), so no import can hide
a cycle by where it is written."""
import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "loadgen" / "bench"


def module_name(path: Path) -> str:
    parts = path.relative_to(BENCH.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The bench modules `path` imports, wherever in it the import is."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for a in node.names:  # `from . import x` names a module; `from .m import x` a name in m
                found |= {f"{source}.{a.name}"} & modules or {source} & modules
    return found - {name}


def module_graph() -> dict[str, set[str]]:
    paths = sorted(BENCH.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imports_of(p, modules) for p in paths}


def package_of(module: str) -> str:
    """bench.measure.usage -> bench.measure; bench.results -> bench.results."""
    return ".".join(module.split(".")[:2])


def package_graph(modules: dict[str, set[str]]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, imported in modules.items():
        graph.setdefault(package_of(module), set()).update(
            package_of(m) for m in imported if package_of(m) != package_of(module))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each node that is on one (depth-first, from the node back to itself)."""
    found = []
    for start in sorted(graph):
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    found.append(path + [start])
                    stack = []
                    break
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    return found


def test_the_graph_is_read_from_the_source():
    graph = module_graph()
    assert "bench.measure.bottleneck" in graph["bench.results"]
    assert "bench.checks.framing" in graph["bench.checks.conformance"]
    assert {"bench.results", "bench.measure", "bench.progress", "bench.benchmark", "bench.clients",
            "bench.checks"} <= set(package_graph(graph))


def test_a_cycle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"], ["b", "c", "a", "b"],
                                                                        ["c", "a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_package_of_bench_imports_one_that_imports_it():
    assert cycles(package_graph(module_graph())) == []


def test_no_module_of_bench_imports_one_that_imports_it():
    # conformance and framing share checks/raw_http.py rather than each other
    assert cycles(module_graph()) == []
