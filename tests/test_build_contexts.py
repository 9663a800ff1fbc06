"""loadgen/ is one build context for bench and the seed, so that what both
read (labfiles/) has one home: each image built from it copies exactly the
packages of loadgen/ the module it runs imports, its own and what those
import in turn, no more (the seed's image has none of bench). No Docker:
compose.yaml read with PyYAML, the Dockerfiles as text, the imports with
ast."""
import ast
import json
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
LOADGEN = REPO / "loadgen"
PACKAGES = {p.name for p in LOADGEN.iterdir() if (p / "__init__.py").is_file()}


def loadgen_builds() -> dict[str, Path]:
    """Each compose service built from loadgen/: its Dockerfile."""
    services = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]
    return {name: REPO / s["build"]["context"] / s["build"].get("dockerfile", "Dockerfile")
            for name, s in services.items() if "build" in s and (REPO / s["build"]["context"]) == LOADGEN}


def runs(dockerfile: Path) -> str:
    """The package `python -m PACKAGE` of the image's ENTRYPOINT or CMD."""
    commands = [json.loads(line.split(None, 1)[1]) for line in dockerfile.read_text().splitlines()
                if line.startswith(("ENTRYPOINT ", "CMD "))]
    return next(words[words.index("-m") + 1] for words in commands if "-m" in words)


def copied_packages(dockerfile: Path) -> set[str]:
    """The packages of loadgen/ the Dockerfile copies from its context."""
    sources = set()
    for line in dockerfile.read_text().splitlines():
        if line.startswith("COPY ") and "--from=" not in line:
            sources.update(line.split()[1:-1])
    return sources & PACKAGES


def imported_packages(package: str) -> set[str]:
    """`package` and the packages of loadgen/ it imports, directly or through another."""
    found, todo = set(), [package]
    while todo:
        name = todo.pop()
        found.add(name)
        for path in (LOADGEN / name).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module else []
                todo += [top for n in names if (top := n.split(".")[0]) in PACKAGES - found]
    return found


def test_bench_and_the_seed_are_built_from_loadgen():
    assert {"settings", "seed", "bench"} <= set(loadgen_builds())
    assert all(dockerfile.is_file() for dockerfile in loadgen_builds().values())


def test_each_image_copies_what_its_module_imports_and_no_more():
    images = {name: (runs(dockerfile), copied_packages(dockerfile)) for name, dockerfile in loadgen_builds().items()}
    assert images["seed"] == ("seed", {"seed", "labfiles"})
    assert images["bench"] == ("bench", {"bench", "labfiles"})
    for name, (package, copied) in images.items():
        assert copied == imported_packages(package), name
