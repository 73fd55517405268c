"""Entry completeness and pinned references (``rules check --entries``), the INFO-level principle
(``info_level``), and the benign corpus (``rules/benign/*.log``)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import SCANNERS
from rule_tables import SHA, complete_table, write_rule

from correlator import rulecheck
from correlator.rulecheck import (
    ENTRY_KEYS,
    check_corpus,
    check_entries,
    check_examples,
    corpus_files,
    entry_keys_written,
    entry_problems,
    info_marked,
    load_all,
    unpinned,
)
from correlator.ruleset import builtin_rules_dir, load_rules, rule_files

BUILTIN = builtin_rules_dir()


def cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "correlator", *args], capture_output=True, timeout=300,
                          env={**os.environ, "CORRELATE_CACHE": "off"})


# --- entry completeness: the checker catches each defect on a hand-made table ---------------------


@pytest.mark.parametrize("role", ["primary", "collateral", "teardown", "job", "context"])
def test_a_complete_entry_has_no_problems(role):
    assert entry_problems(complete_table(role)) == []
    assert entry_keys_written(complete_table(role))


@pytest.mark.parametrize("key", ENTRY_KEYS)
def test_each_missing_entry_key_is_named(key):
    table = complete_table()
    del table[key]
    problems = entry_problems(table)
    assert len(problems) == 1 and problems[0].startswith("entry incomplete: missing") and key in problems[0]
    assert not entry_keys_written(table)


@pytest.mark.parametrize("key, blank", [("cheapest_check", "  "), ("looks_like", []), ("versions", []),
                                        ("fingerprint", ""), ("when", {"phase": "training", "trigger": ""})])
def test_a_blank_entry_key_counts_as_missing(key, blank):
    table = complete_table()
    table[key] = blank
    assert entry_problems(table) == [f"entry incomplete: missing {key}"]


def test_missing_keys_are_listed_together_in_schema_order():
    table = complete_table()
    for key in ("versions", "domain", "prevention"):
        del table[key]
    assert entry_problems(table) == ["entry incomplete: missing domain, versions, prevention"]


def test_a_primary_rule_must_write_explains_but_may_write_it_empty():
    table = complete_table("primary")
    assert table["explains"] == [] and entry_problems(table) == []
    del table["explains"]
    (problem,) = entry_problems(table)
    assert "primary rule must write 'explains'" in problem
    assert not entry_keys_written(table)
    collateral = complete_table("collateral")
    assert "explains" not in collateral and entry_problems(collateral) == []


@pytest.mark.parametrize("role, restart, expected", [
    ("primary", "follow-root", "'follow-root' is for collateral and teardown rules, not primary"),
    ("job", "follow-root", "'follow-root' is for collateral and teardown rules, not job"),
    ("context", "follow-root", "'follow-root' is for collateral and teardown rules, not context"),
    ("collateral", "none", "'none' is for context rules, not collateral"),
    ("primary", "none", "'none' is for context rules, not primary"),
    ("context", "retry", "restart must be 'none', not 'retry'"),
])
def test_restart_must_suit_the_role(role, restart, expected):
    table = complete_table(role)
    table["restart"] = restart
    problems = entry_problems(table)
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("url", [
    f"https://github.com/NVIDIA/nccl/blob/{SHA}/src/proxy.cc",
    "https://github.com/pytorch/pytorch/blob/v2.5.1/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp",
    "https://github.com/NVIDIA/nccl/tree/v2.21.5-1/src",
    "https://github.com/Lightning-AI/pytorch-lightning/blob/2.4.0/src/lightning/pytorch/trainer/trainer.py#L10",
    "https://github.com/NVIDIA/Megatron-LM/blob/core_r0.8.0/megatron/training/training.py",
    "https://github.com/SchedMD/slurm/blob/slurm-23-11-10-1/src/srun/srun.c",
    f"https://raw.githubusercontent.com/NVIDIA/nccl/{SHA}/src/init.cc",
    f"https://github.com/NVIDIA/nccl/blob/{SHA}/docs/stable/x.md",  # a folder named stable at a fixed commit
    "https://github.com/pytorch/pytorch/issues/12345",
    "https://github.com/pytorch/pytorch/pull/64241",
    f"https://github.com/pytorch/pytorch/commit/{SHA}",
    "https://docs.pytorch.org/docs/2.5/distributed.html",
    "https://docs.nvidia.com/deploy/xid-errors/index.html",
])
def test_pinned_references_pass(url):
    assert unpinned(url) is None


@pytest.mark.parametrize("url, why", [
    ("https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp", "'main'"),
    ("https://github.com/NVIDIA/nccl/blob/master/src/proxy.cc", "'master'"),
    ("https://github.com/NVIDIA/nccl/tree/HEAD/src", "'HEAD'"),
    ("https://github.com/microsoft/DeepSpeed/blob/develop/deepspeed/runtime/engine.py", "'develop'"),
    ("https://github.com/pytorch/pytorch/blob/nightly/torch/distributed/run.py", "'nightly'"),
    ("https://github.com/pytorch/pytorch/blob/0123abc/torch/distributed/run.py", "'0123abc'"),  # a short sha
    ("https://github.com/pytorch/pytorch/blob/release/2.5/torch/distributed/run.py", "'release'"),
    ("https://raw.githubusercontent.com/NVIDIA/nccl/master/src/init.cc", "'master'"),
    ("https://docs.pytorch.org/docs/stable/distributed.html", "'/stable/'"),
    ("https://deepspeed.readthedocs.io/en/latest/zero3.html", "'/latest/'"),
    ("https://pytorch.org/docs/main/notes/cuda.html", "'/main/'"),
    ("https://example.org/docs/master/index.html", "'/master/'"),
    ("https://pytorch.org/nightly/", "'/nightly/'"),
    ("torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp", "not a URL"),
])
def test_moving_references_are_caught(url, why):
    reason = unpinned(url)
    assert reason is not None and why in reason, reason


def test_unpinned_references_and_version_sources_are_entry_problems():
    table = complete_table()
    table["references"] = [table["references"][0], "https://github.com/NVIDIA/nccl/blob/master/src/proxy.cc"]
    table["versions"] = [*table["versions"],
                         {"software": "NCCL", "range": "all", "wording": "x",
                          "source": "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/latest/env.html"},
                         {"software": "NCCL", "range": "all", "wording": "x"}]
    problems = entry_problems(table)
    assert problems == [
        "references[1] is not pinned: links the moving ref 'master': name a 40-hex commit or a release tag: "
        "https://github.com/NVIDIA/nccl/blob/master/src/proxy.cc",
        "versions[1].source is not pinned: carries the moving path segment '/latest/': link a versioned page: "
        "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/latest/env.html",
        "versions[2].source is not pinned: no source: None",
    ]


def test_check_entries_reads_each_file_as_written(tmp_path):
    good = write_rule(tmp_path, complete_table())
    broken = complete_table("primary")
    broken["id"] = "custom.gadget-failed"
    del broken["explains"], broken["fingerprint"]
    bad = write_rule(tmp_path, broken)
    rules, load_problems = load_all([tmp_path], include_builtin=False)
    assert load_problems == [] and len(rules) == 2
    problems = check_entries(rules)
    assert {p.path for p in problems} == {str(bad)}, problems
    text = "\n".join(str(p) for p in problems)
    assert "missing fingerprint" in text and "explains" in text and str(good) not in text


def test_rules_check_entries_is_the_switch(tmp_path, monkeypatch):
    broken = complete_table()
    del broken["looks_like"]
    write_rule(tmp_path, broken)
    args = dict(dirs=[tmp_path], include_builtin=False, scanners=("regex",))
    _, hard = rulecheck.check_all(**args, entries=True)
    assert any("missing looks_like" in p.message for p in hard)
    _, soft = rulecheck.check_all(**args, entries=False)
    assert not any("looks_like" in p.message for p in soft)
    # the default follows ENTRIES_REQUIRED: flipping it makes plain `rules check` fail on entries
    monkeypatch.setattr(rulecheck, "ENTRIES_REQUIRED", True)
    _, flipped = rulecheck.check_all(**args)
    assert any("missing looks_like" in p.message for p in flipped)
    monkeypatch.setattr(rulecheck, "ENTRIES_REQUIRED", False)
    _, plain = rulecheck.check_all(**args)
    assert not any("looks_like" in p.message for p in plain)


def test_cli_rules_check_entries(tmp_path):
    write_rule(tmp_path / "ok", complete_table())
    r = cli("rules", "check", "--entries", "--no-builtin-rules", "--rules", str(tmp_path / "ok"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().strip() == "1 of 1 entries complete: ok"
    broken = complete_table()
    del broken["when"]
    broken["references"] = ["https://github.com/NVIDIA/nccl/blob/master/src/proxy.cc"]
    path = write_rule(tmp_path / "bad", broken)
    r = cli("rules", "check", "--entries", "--no-builtin-rules", "--rules", str(tmp_path / "bad"))
    err = r.stderr.decode()
    assert r.returncode == 1
    assert f"error: {path}: entry incomplete: missing when" in err and "'master'" in err
    assert "0 of 1 entries complete: 2 problem(s) in 1 file(s)" in r.stdout.decode()
    if not rulecheck.ENTRIES_REQUIRED:  # until the lead flips the switch, plain `rules check` passes
        r = cli("rules", "check", "--no-builtin-rules", "--rules", str(tmp_path / "bad"))
        assert r.returncode == 0, r.stderr


# --- the flip: every entry whose keys are all written must be free of defects ----------------------
# Parametrized over the rule files whose entry keys are all present, so it grows as entries are
# written; once ENTRIES_REQUIRED is switched on it covers every rule file.


def _raw(path: Path) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


WRITTEN = [p for p in rule_files(BUILTIN) if rulecheck.ENTRIES_REQUIRED or entry_keys_written(_raw(p))]


@pytest.mark.parametrize("path", WRITTEN, ids=[p.relative_to(BUILTIN).as_posix() for p in WRITTEN])
def test_written_entries_are_complete_and_pinned(path):
    assert entry_problems(_raw(path)) == []


# --- INFO-level lines ------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "gpu-a09:1843311:1843420 [3] NCCL INFO comm 0x55d1c7a0 rank 3 nranks 8 cudaDev 3 busId 5d000 - Init COMPLETE",
    "2026-12-02 00:33:31,250 INFO train: step 5 loss 0.8616",
    "2024-05-01 10:00:00,001 - transformers.trainer - INFO - ***** Running training *****",
    "[2024-05-01 10:00:00,001] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=0, lr=[0.0001]",
    "[INFO|trainer.py:2078] 2024-05-01 10:00:00,001 >>   Num examples = 1,000",
    "INFO:torch.distributed.elastic.agent.server.api:[default] Starting worker group",
    "I1201 12:00:00.123000 140234 torch/distributed/elastic/agent/server/api.py:879] [default] worker group "
    "successfully finished.",
    "[I305 10:17:38.040221001 socket.cpp:752] [c10d] The client socket has connected to [::1]:29500",
    "[I socket.cpp:752] [c10d] The client socket has connected to [localhost]:29500",
])
def test_info_markers(text):
    assert info_marked(text)


@pytest.mark.parametrize("text", [
    "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error (run "
    "with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
    "gpu-n39:21345:21402 [3] init.cc:1247 NCCL WARN Mismatched collective detected",
    "2026-12-02 00:33:30,994 ERROR train: metrics upload failed, will retry at the next step",
    "[W1201 12:00:00.123000 140234 torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment variable",
    "E1201 12:00:00.123000 140234 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1)",
    "RuntimeError: INFORMATION missing",
])
def test_not_info_markers(text):
    assert not info_marked(text)


def _info_rule(**extra) -> dict:
    table = complete_table("primary")
    table["match"] = {"any": ["Widget lost contact"], "prefilter": ["Widget lost contact"]}
    table["examples"] = [
        {"expect": "match", "log": "gpu-a01:100:200 [0] NCCL INFO Widget lost contact with peer 3"},
        {"expect": "no-match", "log": "gpu-a01:100:200 [0] NCCL INFO Widget in contact"},
    ]
    table.update(extra)
    return table


@pytest.mark.parametrize("scanner", SCANNERS)
def test_an_info_line_taken_for_a_failure_needs_info_level(tmp_path, scanner):
    write_rule(tmp_path / "without", _info_rule())
    rules, _ = load_all([tmp_path / "without"], include_builtin=False)
    problems = [p for p in check_examples(rules, scanner) if "INFO-level" in p.message]
    assert len(problems) == 1 and problems[0].path == rules[0].path
    assert "Widget lost contact with peer 3" in problems[0].message and "info_level" in problems[0].message

    write_rule(tmp_path / "with", _info_rule(info_level="NCCL logs this loss at INFO, and it is the failure"))
    rules, _ = load_all([tmp_path / "with"], include_builtin=False)
    assert rules[0].info_level.startswith("NCCL logs this loss")
    assert check_examples(rules, scanner) == []


@pytest.mark.parametrize("scanner", SCANNERS)
def test_an_info_line_matched_by_a_context_rule_is_fine(tmp_path, scanner):
    table = _info_rule(role="context", restart="none")
    del table["explains"]
    write_rule(tmp_path, table)
    rules, _ = load_all([tmp_path], include_builtin=False)
    assert check_examples(rules, scanner) == []


def test_an_empty_info_level_is_refused(tmp_path):
    write_rule(tmp_path, _info_rule(info_level=" "))
    _, problems = load_all([tmp_path], include_builtin=False)
    assert len(problems) == 1 and "info_level must say why" in problems[0].message


# --- the benign corpus -----------------------------------------------------------------------------

CORPUS = corpus_files([BUILTIN])


def test_the_loader_ignores_the_corpus_folder(tmp_path):
    write_rule(tmp_path, complete_table())
    (tmp_path / "benign").mkdir()
    (tmp_path / "benign" / "chatter.log").write_text("Widget failed\n")
    (tmp_path / "benign" / "README.md").write_text("# where the lines come from\n")
    assert [p.name for p in rule_files(tmp_path)] == ["widget-failed.toml"]
    rules, problems = load_all([tmp_path], include_builtin=False)
    assert problems == [] and [r.id for r in rules] == ["custom.widget-failed"]
    assert load_rules([tmp_path], include_builtin=False)[0].id == "custom.widget-failed"
    assert corpus_files([tmp_path]) == [tmp_path / "benign" / "chatter.log"]


@pytest.mark.parametrize("scanner", SCANNERS)
def test_a_corpus_line_taken_for_a_failure_names_line_file_and_rule(tmp_path, scanner):
    write_rule(tmp_path, complete_table())
    context = complete_table("context")
    context.update(id="custom.gadget-note", match={"any": ["Gadget noted"], "prefilter": ["Gadget noted"]},
                   examples=[{"expect": "match", "log": "Gadget noted"}, {"expect": "no-match", "log": "Gadget"}])
    write_rule(tmp_path, context)
    log = tmp_path / "benign" / "chatter.log"
    log.parent.mkdir()
    log.write_text("all is well\nGadget noted\n[default0]:Widget failed\nstep 10\n")
    rules, _ = load_all([tmp_path], include_builtin=False)
    problems = check_corpus(rules, corpus_files([tmp_path]), scanner)
    assert [p.path for p in problems] == [f"{log}:3"], problems
    assert problems[0].message.startswith("custom.widget-failed (primary")
    assert "'[default0]:Widget failed'" in problems[0].message and "widget-failed.toml" in problems[0].message
    # and through check_all, which finds the corpus beside the rules
    _, everything = rulecheck.check_all([tmp_path], include_builtin=False, scanners=(scanner,))
    assert [p.path for p in everything if p.level == "error"] == [f"{log}:3"]


def test_a_corpus_info_line_says_so(tmp_path):
    write_rule(tmp_path, _info_rule())
    log = tmp_path / "benign" / "nccl.log"
    log.parent.mkdir()
    log.write_text("gpu-a01:100:200 [0] NCCL INFO Widget lost contact with peer 3 (it came back)\n")
    rules, _ = load_all([tmp_path], include_builtin=False)
    (problem,) = check_corpus(rules, corpus_files([tmp_path]), "regex")
    assert problem.path == f"{log}:1" and "an INFO-level line, and the rule has no info_level" in problem.message


def test_the_builtin_corpus_is_large_and_sourced():
    assert CORPUS, "rules/benign/*.log is missing"
    lines = [line for p in CORPUS for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(lines) >= 300, len(lines)
    readme = (BUILTIN / "benign" / "README.md").read_text(encoding="utf-8")
    for p in CORPUS:
        assert f"`{p.name}`" in readme, f"rules/benign/README.md does not say where {p.name} comes from"


@pytest.mark.parametrize("scanner", SCANNERS)
def test_no_builtin_rule_takes_a_benign_line_for_a_failure(scanner):
    rules = load_rules()
    problems = check_corpus(rules, CORPUS, scanner)
    assert problems == [], "\n".join(str(p) for p in problems)
