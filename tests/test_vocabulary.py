"""The vocabulary of capture names and tags: code reads it through one module, the rules README
documents all of it, the loader warns about near misses, and meaning comes from tags, not rule ids."""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path

import pytest

from correlator.model import DiagCode, Verdict
from correlator.model.vocabulary import Capture, Tag, near_misses
from correlator.pipeline import Options, analyze
from correlator.rulecheck import load_all
from correlator.ruleset import builtin_rules_dir, load_rules, vocabulary_diagnostics

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "correlator"


def _code_files() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py") if p.name != "vocabulary.py"]


def _literal_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """String literals used as a capture name or a tag: ``x.capture("..")``, ``caps.get("..")``,
    ``caps[".."]``, ``".." in x.tags``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            arg = node.args[0]
            name = node.func.attr
            on_caps = isinstance(node.func.value, ast.Name) and node.func.value.id == "caps"
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and (
                    name == "capture" or (on_caps and name == "get")):
                out.append((node.lineno, arg.value))
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "caps" \
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            out.append((node.lineno, node.slice.value))
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
            for op, right in zip(node.ops, node.comparators):
                if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, ast.Attribute) and right.attr == "tags":
                    out.append((node.lineno, node.left.value))
    return out


def test_the_code_reads_capture_names_and_tags_only_through_the_vocabulary():
    found = [f"{p.relative_to(ROOT)}:{line}: {value!r}" for p in _code_files()
             for line, value in _literal_reads(ast.parse(p.read_text()))]
    assert found == []
    # the check finds what it looks for
    sample = 'def f(m, e, caps):\n    return m.capture("exitcode"), "timeout" in e.rule.tags, caps["pid"]\n'
    assert [v for _, v in _literal_reads(ast.parse(sample))] == ["exitcode", "timeout", "pid"]


def test_every_word_of_the_vocabulary_is_read_by_some_code():
    text = "\n".join(p.read_text() for p in _code_files())
    unread = [f"{type(w).__name__}.{w.name}" for w in (*Capture, *Tag)
              if not re.search(rf"\b{type(w).__name__}\.{w.name}\b", text)]
    assert unread == []


def test_no_rule_id_is_written_in_the_code():
    """Meaning comes from tags: no literal names a built-in rule or a prefix of rule ids ("launcher.")."""
    ids = {r.id for r in load_rules()}
    categories = {i.split(".", 1)[0] for i in ids}
    hits = [f"{p.relative_to(ROOT)}:{node.lineno}: {node.value!r}" for p in _code_files()
            for node in ast.walk(ast.parse(p.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value
            and " " not in node.value and node.value.split(".", 1)[0] in categories
            and any(i.startswith(node.value) for i in ids)]
    assert hits == []


def _documented(section: str) -> set[str]:
    text = (ROOT / "rules" / "README.md").read_text()
    body = text.split(f"### {section}", 1)[1].split("\n### ", 1)[0]
    if section.startswith("Capture"):
        cells = [ln.split("|")[1] for ln in body.splitlines() if ln.startswith("| `")]
        return {w for c in cells for w in re.findall(r"`([^`]+)`", c)}
    return {w for ln in body.splitlines() if ln.startswith("- `")
            for w in re.findall(r"`([^`]+)`", ln.split(":", 1)[0] if not ln.startswith("- `signal:") else "")}


def test_the_rules_readme_documents_exactly_the_vocabulary():
    assert _documented("Capture names with a meaning") == {str(c) for c in Capture}
    assert _documented("Tags with a meaning") == {str(t) for t in Tag}
    assert "`signal:NAME`" in (ROOT / "rules" / "README.md").read_text()


def test_near_misses_are_slips_of_a_known_word_and_nothing_else():
    said = near_misses(["exit_code", "Local-Rank", "singal", "suspect_rnak"],
                       ["worker_exit", "compeltion", "signal:SIGSEGV", "signal:segv"])
    assert [re.search(r"'([^']+)'", s).group(1) for s in said] == [
        "exit_code", "Local-Rank", "singal", "suspect_rnak", "worker_exit", "compeltion", "signal:SIGSEGV", "signal:segv"]
    assert "did you mean 'exitcode'" in said[0] and "did you mean 'completion'" in said[5]
    # known words, other names a letter longer or shorter, and free-form names are not slips
    assert near_misses(["exitcode", "task", "ntasks", "timeout_s", "worker_pid", "xid", "pg", "op"],
                       ["worker-exit", "hang", "signal:SEGV", "teardown", "store", "storage"]) == []


def test_the_built_in_rules_use_the_vocabulary_without_slips():
    assert vocabulary_diagnostics(load_rules()) == []


def _user_rule(tmp_path: Path, capture: str) -> Path:
    """A copy of a built-in rule under another category, its exit code captured as ``capture``."""
    src = (builtin_rules_dir() / "data" / "dataloader-worker-exited-unexpectedly.toml").read_text()
    text = (src.replace('id = "data.dataloader-worker-exited-unexpectedly"', 'id = "site.dataloader-exit"')
               .replace('category = "data"', 'category = "site"').replace("worker_code", capture))
    text = re.sub(r"(?ms)^(related = \[.*?^\]|explains = \[[^\n]*\])\n", "", text)  # alone, it names no other rule
    folder = tmp_path / "rules" / "site"
    folder.mkdir(parents=True)
    path = folder / "dataloader-exit.toml"
    path.write_text(text)
    return path


def test_a_rule_with_a_misspelt_capture_loads_and_is_warned_about_naming_its_file(tmp_path):
    path = _user_rule(tmp_path, "exit_code")
    log = tmp_path / "train.log"
    log.write_text("RuntimeError: DataLoader worker (pid 90211) exited unexpectedly with exit code 1.\n")
    rep = analyze([str(log)], Options(rule_dirs=(str(tmp_path / "rules"),), include_builtin_rules=False, tz="UTC",
                                      workers=1))
    warned = [d for d in rep.diagnostics if d.code is DiagCode.RULE_VOCABULARY]
    assert [(d.level, d.path) for d in warned] == [("warning", str(path))]
    assert "'exit_code'" in warned[0].message and "'exitcode'" in warned[0].message
    assert rep.root_cause is not None and rep.root_cause.rule == "site.dataloader-exit"  # it still runs
    _, problems = load_all([tmp_path / "rules"])
    assert [(p.level, p.path) for p in problems if "exit_code" in p.message] == [("warning", str(path))]


@pytest.mark.slow  # (the CLI over a job with a user rule folder: its own rule set compiled, ~10-20 s)
def test_a_well_spelt_user_rule_gets_no_warning(tmp_path):
    _user_rule(tmp_path, "worker_status")
    log = tmp_path / "train.log"
    log.write_text("RuntimeError: DataLoader worker (pid 90211) exited unexpectedly with exit code 1.\n")
    rep = analyze([str(log)], Options(rule_dirs=(str(tmp_path / "rules"),), tz="UTC", workers=1))
    assert not [d for d in rep.diagnostics if d.code is DiagCode.RULE_VOCABULARY]


#: two srun tasks, each a node's torchrun agent: the agent's lines behind a bare task prefix say the
#: task numbers nodes, so the worker's traceback behind ``1: `` is not rank 1's
AGENTS = """\
0: [2026-03-02 10:00:00,000] torch.distributed.elastic.agent.server.api: [WARNING] Received Signals.SIGTERM death signal, shutting down workers
0: W0302 10:00:01.000000 140 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 1234 closing signal SIGTERM
1: [2026-03-02 10:00:00,500] torch.distributed.elastic.agent.server.api: [INFO] starting
1: Traceback (most recent call last):
1:   File "train.py", line 10, in <module>
1: RuntimeError: CUDA error: an illegal memory access was encountered
"""


def _root_rank(tmp_path: Path, rules) -> int | None:
    (tmp_path / "slurm-77.out").write_text(AGENTS)
    rep = analyze([str(tmp_path)], Options(tz="UTC", workers=1), rules=rules)
    assert rep.root_cause is not None and rep.root_cause.rule == "cuda.illegal-memory-access"
    return rep.root_cause.rank


def test_the_launcher_tag_not_the_rule_category_says_a_task_is_a_nodes_agent(tmp_path):
    rules = load_rules()
    assert _root_rank(tmp_path, rules) is None
    # the launcher's rules moved to another category, their tag kept: the same reading
    moved = [replace(r, id=f"site.{r.id.replace('.', '-')}", category="site") if Tag.LAUNCHER in r.tags else r
             for r in rules]
    assert _root_rank(tmp_path, moved) is None
    # the same rules without the tag: srun's task is taken for the rank
    untagged = [replace(r, tags=tuple(t for t in r.tags if t != Tag.LAUNCHER)) for r in rules]
    assert _root_rank(tmp_path, untagged) == 1


@pytest.mark.slow  # (two user rule sets compiled, ~10-20 s)
def test_a_root_from_failure_tables_alone_takes_the_rule_tagged_failure_table(tmp_path):
    (tmp_path / "slurm-7.out").write_text((ROOT / "tests" / "fixtures" / "tables-only-slurm-7.out").read_text())
    rules = load_rules()
    rep = analyze([str(tmp_path)], Options(tz="UTC", workers=1), rules=rules)
    assert rep.root_cause is not None and rep.root_cause.decided_by == "failure-table"
    tagged = next(r for r in rules if Tag.FAILURE_TABLE in r.tags)
    assert rep.root_cause.rule == tagged.id
    # the tag on a copy under another id: that rule names the root
    copy = replace(tagged, id="site.table-entry", category="site", title="a failure table's entry")
    moved = [replace(r, tags=tuple(t for t in r.tags if t != Tag.FAILURE_TABLE)) for r in rules] + [copy]
    rep2 = analyze([str(tmp_path)], Options(tz="UTC", workers=1), rules=moved)
    assert rep2.root_cause is not None and rep2.root_cause.rule == "site.table-entry"
    assert rep2.root_cause.rank == rep.root_cause.rank
    # no rule with the tag: the tables alone name no root
    none = [replace(r, tags=tuple(t for t in r.tags if t != Tag.FAILURE_TABLE)) for r in rules]
    rep3 = analyze([str(tmp_path)], Options(tz="UTC", workers=1), rules=none)
    assert rep3.verdict is Verdict.UNDETERMINED or rep3.root_cause.decided_by != "failure-table"
