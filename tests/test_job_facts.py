"""``Report.job`` and ``Report.attempts`` are typed (``JobFacts``, ``AttemptVerdict``), and their JSON
is the one the dicts they replaced made: the golden file holds that output, taken before the change,
for a job with torchrun's failure tables, one without, and a restarted one."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from report_fixtures import empty_report

from correlator.model import AttemptVerdict, JobFacts, LauncherTableRow, Verdict
from correlator.pipeline import Options, analyze
from correlator.report.jsonout import to_dict

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = json.loads((ROOT / "tests" / "golden" / "job-and-attempts.json").read_text())
#: a job id made from the inputs' absolute paths differs between checkouts
HASHED_ID = "job-<hash of the paths>"
#: job facts the JSON gained after the golden was taken
ADDED_SINCE = ("time_zone", "time_zone_used")


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_the_json_of_job_and_attempts_is_what_it_was(case):
    rep = analyze([str(ROOT / case)], Options(workers=1))
    assert isinstance(rep.job, JobFacts) and all(isinstance(a, AttemptVerdict) for a in rep.attempts)
    d = to_dict(rep)
    job = dict(d["job"])
    for key in ADDED_SINCE:  # facts added after the golden was taken (issue 15 item 3: the zone)
        assert key in job
        del job[key]
    if job["id"].startswith("job-"):
        job["id"] = HASHED_ID
    got = json.dumps({"job": job, "attempts": d["attempts"]}, indent=2, ensure_ascii=False)
    assert got == json.dumps(GOLDEN[case], indent=2, ensure_ascii=False)


def test_a_restarted_jobs_attempts_are_typed_verdicts():
    rep = analyze([str(ROOT / "tests" / "recorded" / "restart-both-attempts-logdir4")], Options(workers=1))
    assert [a.attempt for a in rep.attempts] == list(reversed(rep.job.attempts)) and len(rep.attempts) == 2
    assert all(isinstance(a.verdict, Verdict) for a in rep.attempts)
    assert all(isinstance(t, LauncherTableRow) for t in rep.job.launcher_root_cause_tables)


def test_the_failure_tables_key_is_left_out_only_when_there_are_none():
    none = to_dict_of(JobFacts(id="1", ranks=2))
    assert "launcher_root_cause_tables" not in none and none["attempts"] == []
    some = to_dict_of(JobFacts(id="1", ranks=2, launcher_root_cause_tables=(LauncherTableRow("n", 1, 1, -6, None),)))
    assert some["launcher_root_cause_tables"] == [{"node": "n", "rank": 1, "local_rank": 1, "exitcode": -6,
                                                   "time": None}]


def to_dict_of(job: JobFacts) -> dict:
    return to_dict(replace(empty_report(), job=job))["job"]
