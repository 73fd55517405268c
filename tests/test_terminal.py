"""The terminal summary as a user meets it: colour only on a terminal and never with NO_COLOR, laid
out at the terminal's width, ``--brief`` three lines, log text escaped and secrets masked."""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

from correlator.pipeline import Options, analyze
from correlator.report import terminal

ROOT = Path(__file__).resolve().parent.parent
HANG = ROOT / "sample_logs" / "nccl-hang-silent-culprit"
EIO = ROOT / "sample_logs" / "lustre-eio-checkpoint"
_SGR = re.compile(r"\x1b\[[0-9;]*m")


def _on_a_terminal(args: list[str], columns: int, env: dict[str, str] | None = None) -> str:
    """The CLI's stdout when stdout is a terminal ``columns`` wide (a pseudo-terminal)."""
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    e = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "LINES")}
    e.update(env or {})
    proc = subprocess.Popen([sys.executable, "-m", "correlator", *args], stdout=follower, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, env=e, cwd=ROOT)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # the follower closed: the program ended
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(leader)
    return b"".join(chunks).decode("utf-8").replace("\r\n", "\n")


def test_a_terminal_gets_colour_at_its_width_and_no_colour_with_no_color() -> None:
    args = [str(EIO.relative_to(ROOT)), "--tz", "UTC"]
    coloured = _on_a_terminal(args, 80)
    assert _SGR.search(coloured), "no colour on a terminal"
    plain = _SGR.sub("", coloured)
    # the prose is laid out at the width; a log line is one row, whole (a token in it stays searchable)
    prose = [line for line in plain.splitlines() if "slurm-88123.out:" not in line]
    assert max(len(line) for line in prose) <= 80 and len(prose) > 20
    assert plain.startswith("root cause    rank 19 on gpu-a03 failed first")
    no_color = _on_a_terminal(args, 80, {"NO_COLOR": "1"})
    assert "\x1b" not in no_color and no_color.splitlines()[:5] == plain.splitlines()[:5]
    wide = _on_a_terminal(args, 160, {"NO_COLOR": "1"})
    assert max(len(line) for line in wide.splitlines() if "slurm-88123.out:" not in line) > 100  # the terminal's
    forced = _on_a_terminal([*args, "--color"], 80, {"NO_COLOR": "1"})
    assert _SGR.search(forced)  # an explicit --color is the user's word over NO_COLOR


def test_brief_is_three_lines_verdict_root_line_fix() -> None:
    for job, line in ((EIO, "slurm-88123.out:1368  OSError: [Errno 5] Input/output error"),
                      (HANG, "rank 11 on hgx-01 logged nothing of it")):
        r = subprocess.run([sys.executable, "-m", "correlator", str(job.relative_to(ROOT)), "--tz", "UTC", "--brief"],
                           capture_output=True, cwd=ROOT, timeout=120)
        lines = r.stdout.decode().splitlines()
        assert r.returncode == 0 and len(lines) == 3, lines
        report = analyze([str(job)], Options(tz="UTC"))
        assert report.root_cause is not None and str(report.root_cause.rank) in lines[0]
        assert line in lines[1]
        assert lines[2].startswith("fix: ") and len(lines[2]) > 10


def test_brief_of_a_healthy_job_says_there_is_nothing_to_fix() -> None:
    report = analyze([str(ROOT / "sample_logs" / "healthy")], Options(tz="UTC"))
    lines = terminal.render(report, brief=True).splitlines()
    assert lines[0] == "no failure found in the logs" and lines[2] == "fix: nothing to fix"


def test_log_text_is_not_markup_and_stays_escaped(tmp_path: Path) -> None:
    """rich is given Text, never markup: a log line's [bold] or [link=...] is shown as written, and
    its control characters as escapes."""
    log = tmp_path / "rank-0.log"
    log.write_text("[2026-03-02 14:07:31] step 10\n"
                   "[2026-03-02 14:07:32] OSError: [Errno 5] Input/output error [bold red]x[/] [link=http://e]y\x1b]0;t\x07\n")
    report = analyze([str(log)], Options(tz="UTC"))
    for color in (False, True):
        text = terminal.render(report, color=color, width=300)
        plain = _SGR.sub("", text)
        assert "[bold red]x[/] [link=http://e]y" in plain and "\\x07" in plain  # (extraction drops the ESC)
        assert "\x07" not in text and "\x1b]" not in text
