"""House rules of the code base: imports point down the stage order; documented surfaces stay documented."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from correlator.ruleset import EXAMPLE_KEYS, MATCH_KEYS, RULE_KEYS

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "correlator"

# lower number = lower layer; a module may import only modules of a lower or equal layer
LAYERS = {
    "model": 0, "errors": 0, "timestamps": 1, "prefixes": 1, "redact": 1,
    "scan": 2, "ruleset": 2, "sources": 2, "identity": 2, "clocks": 2,
    "extract": 3, "digest_io": 3, "explain": 3, "progress": 3, "site": 3,
    "engines": 4, "attribution": 4, "rulecheck": 4,
    "pipeline": 5, "report": 6, "history": 6, "follow": 6,
    "cli": 7, "__main__": 8, "__init__": 0,
}


def _module_layer(path: Path) -> tuple[str, int]:
    rel = path.relative_to(PKG)
    name = rel.parts[0].removesuffix(".py")
    return name, LAYERS.get(name, 6 if rel.parts[0] == "report" else -1)


def test_every_module_has_a_layer_and_a_docstring():
    for path in PKG.rglob("*.py"):
        name, layer = _module_layer(path)
        assert layer >= 0, f"{path}: add the module to LAYERS (and to docs/architecture.md)"
        tree = ast.parse(path.read_text())
        if path.name not in ("__main__.py",):
            assert ast.get_docstring(tree), f"{path}: a module docstring says what it owns"


def test_imports_point_down():
    bad = []
    for path in PKG.rglob("*.py"):
        name, layer = _module_layer(path)
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("correlator"):
                targets.append(node.module)
                if node.module == "correlator":
                    targets += [f"correlator.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets += [a.name for a in node.names if a.name.startswith("correlator")]
            for t in targets:
                parts = t.split(".")
                if len(parts) < 2:
                    continue
                other = LAYERS.get(parts[1], 6 if parts[1] == "report" else -1)
                if other > layer and not (name == "report" and parts[1] == "report"):
                    bad.append(f"{path.relative_to(ROOT)} imports {t}")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_rule_schema_keys_are_documented():
    doc = (ROOT / "rules" / "README.md").read_text()
    for key in [*RULE_KEYS, *MATCH_KEYS, *EXAMPLE_KEYS]:
        assert f"`{key}`" in doc or f"`[{key}]`" in doc or f"`[[{key}]]`" in doc, key


def test_cli_commands_are_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    for cmd in ("correlate rules check", "correlate rules list", "correlate rules explain", "correlate history",
                "--format json", "--format markdown", "--format html", "--format trace", "--parquet", "--follow",
                "--engine dask", "--rules", "--tz", "--no-redact"):
        assert cmd in readme, cmd
    assert re.search(r"## Quickstart", readme)


def test_architecture_doc_names_every_module():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    for path in PKG.rglob("*.py"):
        if path.name in ("__init__.py", "__main__.py"):
            continue
        rel = path.relative_to(PKG).as_posix()
        assert rel.removesuffix(".py") in doc or path.stem in doc, rel


def test_the_wheel_ships_the_analyzer_only(tmp_path: Path) -> None:
    """The development packages (``tools/synth``, the log generator the tests and benchmarks use) stay out
    of the installed wheel: built from a copy of the tree that holds them, it has ``correlator`` only."""
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert packages and all(p == "correlator" or p.startswith("correlator.") for p in packages), packages
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in ("correlator", "tools"):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    assert (src / "tools" / "synth" / "__init__.py").is_file()
    build = "import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])"
    done = subprocess.run([sys.executable, "-c", build, str(tmp_path / "dist")], cwd=src, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "correlator/pipeline.py" in names
    outside = [n for n in names if not n.startswith(("correlator/", "correlate-"))]
    assert not outside, outside
    assert not [n for n in names if "synth" in n], "the generator is in the wheel"

