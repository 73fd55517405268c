"""The README's example output is what the command it shows prints (issue 15 item 14): every
fenced block of the README whose lines start with ``$ correlate`` is run, command by command, from
the repository root, and its output compared line for line. Only the run time in the summary's
last line (``read ... in 0.41 s``) may differ; the commands run with ``TZ=UTC``, the zone the
README's machine had. ``CORRELATE_UPDATE_README=1`` writes the outputs
into the README (review the diff)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_SECONDS = re.compile(r"(lines in )\d+\.\d+( s)$", re.M)


def _examples() -> list[tuple[str, str]]:
    """(command, the output the README shows for it), in README order."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    out: list[tuple[str, str]] = []
    for block in re.findall(r"^```\n(.*?)^```$", text, re.S | re.M):
        if not block.startswith("$ correlate "):
            continue
        for piece in re.split(r"^(?=\$ correlate )", block, flags=re.M):
            if piece:
                command, _, shown = piece.partition("\n")
                out.append((command[2:], shown))
    return out


def test_the_readme_shows_examples() -> None:
    commands = [c for c, _ in _examples()]
    assert any("--brief" in c for c in commands) and any("--brief" not in c for c in commands)


def _run(command: str) -> str:
    argv = shlex.split(command)
    assert argv[0] == "correlate"
    # the summary names the zone unstamped lines were read in: the README shows a machine in UTC
    env = {**os.environ, "TZ": "UTC", "NO_COLOR": "1"}
    r = subprocess.run([sys.executable, "-m", "correlator", *argv[1:]], capture_output=True, cwd=ROOT, timeout=300,
                       env=env)
    assert r.returncode == 0, (command, r.stderr.decode())
    return r.stdout.decode()


def test_every_readme_example_is_what_its_command_prints() -> None:
    if os.environ.get("CORRELATE_UPDATE_README"):
        readme = ROOT / "README.md"
        text = readme.read_text(encoding="utf-8")
        for command, shown in _examples():
            text = text.replace(f"$ {command}\n{shown}", f"$ {command}\n{_run(command)}", 1)
        readme.write_text(text, encoding="utf-8")
    for command, shown in _examples():
        printed = _SECONDS.sub(r"\1N\2", _run(command))
        assert printed == _SECONDS.sub(r"\1N\2", shown), f"README example out of date: {command}"
