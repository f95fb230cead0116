"""The installed package stands alone: benchmarks/ is a folder of the repository, not of the wheel."""

import ast
import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imported_modules(path: Path) -> set[str]:
    """Every module named by an ``import`` or ``from ... import`` statement of one file
    (relative imports, which stay inside ppl_bsvm, left out)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_the_library_never_imports_benchmarks():
    # An installed ppl_bsvm has no benchmarks package: an import of it would fail for users.
    offenders = {
        str(path.relative_to(ROOT)): sorted(m for m in imported_modules(path)
                                            if m == "benchmarks" or m.startswith("benchmarks."))
        for path in sorted((ROOT / "ppl_bsvm").rglob("*.py"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_package_finder_leaves_benchmarks_out():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    assert any(fnmatch.fnmatch("ppl_bsvm.compare", pattern) for pattern in include)
    assert not any(fnmatch.fnmatch(name, pattern) for pattern in include
                   for name in ("benchmarks", "benchmarks.demo"))
