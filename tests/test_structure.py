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

# lower number = lower layer; a module may import only modules of a lower or equal layer. Keys are
# dotted paths under ``correlator``; a module takes the layer of its longest matching key.
LAYERS = {
    "__init__": 0, "model": 0, "errors": 0, "cache": 0, "memory": 0,
    "ruleset": 1, "explain": 1, "progress": 1,
    "extract": 2,
    "correlate": 3,
    "report": 4,
    "rulecheck": 5, "pipeline": 5, "site": 5,
    "follow": 6, "history": 6, "serve": 6,
    "cli": 7, "launch": 7, "__main__": 8,
}
#: stages that must not see each other although their layers would allow it: the correlation stage
#: works on digests only, and a renderer reads a finished Report
FORBIDDEN = {("correlate", "extract"), ("report", "correlate"), ("report", "extract")}


def _layer_of(dotted: str) -> tuple[str, int]:
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in LAYERS:
            return key, LAYERS[key]
    return parts[0], -1


def _module_layer(path: Path) -> tuple[str, int]:
    rel = path.relative_to(PKG).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"] or ["__init__"]
    return _layer_of(".".join(parts))


def test_every_module_has_a_layer_and_a_docstring():
    for path in PKG.rglob("*.py"):
        name, layer = _module_layer(path)
        assert layer >= 0, f"{path}: add the module to LAYERS (and to docs/architecture.md)"
        tree = ast.parse(path.read_text())
        if path.name not in ("__main__.py",):
            assert ast.get_docstring(tree), f"{path}: a module docstring says what it owns"


def _imports(path: Path) -> list[str]:
    targets = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("correlator"):
            targets.append(node.module)
            if node.module == "correlator":
                targets += [f"correlator.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            targets += [a.name for a in node.names if a.name.startswith("correlator")]
    return [t.removeprefix("correlator").lstrip(".") for t in targets if t != "correlator"]


def test_imports_point_down():
    bad = []
    for path in PKG.rglob("*.py"):
        name, layer = _module_layer(path)
        for t in _imports(path):
            other_name, other = _layer_of(t)
            if other > layer:
                bad.append(f"{path.relative_to(ROOT)} imports correlator.{t}")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_stages_do_not_reach_across():
    bad = []
    for path in PKG.rglob("*.py"):
        name, _ = _module_layer(path)
        for t in _imports(path):
            other_name, _ = _layer_of(t)
            if (name, other_name) in FORBIDDEN:
                bad.append(f"{path.relative_to(ROOT)} imports correlator.{t}")
    assert not bad, "a stage reaches into another:\n" + "\n".join(bad)


def test_the_layering_test_sees_a_violation(tmp_path):
    """The checks above would catch an import from correlate into extract (not a test that cannot fail)."""
    assert ("correlate", "extract") in FORBIDDEN
    assert _layer_of("correlate.attribution.verdict") == ("correlate", 3)
    assert _layer_of("extract.scan") == ("extract", 2)
    assert _layer_of("nonexistent")[1] == -1


def test_rule_schema_keys_are_documented():
    doc = (ROOT / "rules" / "README.md").read_text()
    for key in [*RULE_KEYS, *MATCH_KEYS, *EXAMPLE_KEYS]:
        assert f"`{key}`" in doc or f"`[{key}]`" in doc or f"`[[{key}]]`" in doc, key


def test_cli_commands_are_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    for cmd in ("correlate rules check", "correlate rules list", "correlate rules explain", "correlate history",
                "correlate serve",
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
    outside = [n for n in names if not n.startswith(("correlator/", "correlate_ranks-"))]
    assert not outside, outside
    assert not [n for n in names if "synth" in n], "the generator is in the wheel"


def test_the_distribution_name_is_ours_and_the_command_stays(tmp_path: Path) -> None:
    """"correlate" and "correlator" on the package index are unrelated projects (``pip install -U
    correlate`` would replace this tool): the distribution is ``correlate-ranks``; the wheel's metadata
    says so, and it still installs the ``correlate`` command and the ``correlator`` import package."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "correlate-ranks"
    assert project["scripts"] == {"correlate": "correlator.launch:main"}
    build = "import sys; from setuptools import build_meta; print(build_meta.prepare_metadata_for_build_wheel(sys.argv[1]))"
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "correlator", src / "correlator", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "meta").mkdir()
    done = subprocess.run([sys.executable, "-c", build, str(tmp_path / "meta")], cwd=src, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    info = tmp_path / "meta" / done.stdout.strip().splitlines()[-1]
    meta = (info / "METADATA").read_text()
    assert "\nName: correlate-ranks\n" in meta
    assert "correlate = correlator.launch:main" in (info / "entry_points.txt").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "pip install correlate-ranks" in readme



def test_the_model_exports_every_name_and_the_extraction_side_does_not_load_the_report():
    """``correlator.model`` gives every name of ``__all__`` (the report's on first use), and what a
    pool's worker runs (the extraction, the launcher) does not create the report's dataclasses."""
    import correlator.model as model

    for name in model.__all__:
        assert getattr(model, name) is not None, name
    code = ("import sys, correlator.launch, correlator.extract.engines as e, correlator.extract.sources;"
            "e._warm_up(); print('correlator.model.report' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert r.stdout.strip() == "False"


def test_numpy_starts_no_blas_threads_under_correlate():
    """``correlator`` sets OPENBLAS_NUM_THREADS=1 unless the user chose: OpenBLAS's spinning threads
    took the other pool worker's core (the process had two OS threads after ``import numpy``)."""
    code = ("import os, correlator, numpy; numpy.ones((64, 64)) @ numpy.ones((64, 64));"
            "print(len(os.listdir(f'/proc/{os.getpid()}/task')))")
    env = {k: v for k, v in __import__("os").environ.items() if k != "OPENBLAS_NUM_THREADS"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, check=True)
    assert r.stdout.strip() == "1"
