"""The ``correlate`` command's entry point: the pool is forked before the command line's library loads.

``correlate PATH...`` spends ~0.1 s importing typer (and the report side of the package) before it
can parse its command line. For a job for the local pool that time is the workers' to use: when
the arguments are input paths and options that change only the report's form and destination
(``EARLY_OPTIONS``, the same as ``cli._PLAIN``), they are read here, with no import but ``os`` and
``sys``, and ``engines.speculate`` forks the pool on them at once; then ``cli.main`` runs as
always. What is started here is only a guess: ``engines.run_local`` takes the workers' tasks over
only when it is asked for exactly these sources with the default spec, and cancels them otherwise
(a usage error, an option read differently), so a wrong guess costs CPU, never a different report.
"""

from __future__ import annotations

import os
import sys

#: the options of ``analyze`` that change only the report's form and destination (``cli._PLAIN``):
#: each spelling, and whether it takes a value (a test checks them against the typer command)
EARLY_OPTIONS: dict[str, bool] = {
    "--format": True, "-f": True, "--output": True, "-o": True, "--parquet": True, "--job-id": True,
    "--color": False, "--no-color": False, "--redact": False, "--no-redact": False, "--brief": False,
    "--wall-clock": False, "--fail-on-failure": False,
}

#: first words that are not input paths (``cli.main`` reads the command line by them too)
SUBCOMMANDS = frozenset({"analyze", "rules", "history", "serve", "completion", "--help", "-h", "--version",
                         "--install-completion", "--show-completion"})

#: the values of ``--format`` (``cli.FORMATS``): a command line with another is a usage error
FORMATS = ("terminal", "json", "markdown", "html", "trace")

#: the variable the completion scripts set when they ask ``correlate`` for completions (click's name
#: for it): nothing is started early for a completion
COMPLETE_VAR = "_CORRELATE_COMPLETE"


def early_inputs(argv: list[str]) -> list[str] | None:
    """The input paths of ``correlate ARGS`` (``argv`` without the program's name) when ARGS are
    paths and ``EARLY_OPTIONS`` only, each option written ``--name VALUE``, ``--name=VALUE`` or
    ``-x VALUE``; otherwise None (any other option, ``--``, a short option joined to its value, a
    format that is not one, a subcommand but ``analyze``, stdin). Where it gives paths, click's parser gives the same ones."""
    args = argv[1:] if argv[:1] == ["analyze"] else argv
    if not args or (args is argv and args[0] in SUBCOMMANDS):
        return None
    paths: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word == "-" or word == "--":
            return None
        if word.startswith("-"):
            name, eq, value = word.partition("=")
            takes = EARLY_OPTIONS.get(name)
            if takes is None or (eq and (not takes or not name.startswith("--"))):
                return None
            if takes and not eq:
                if i + 1 >= len(args):
                    return None
                i += 1
                value = args[i]
            if name in ("--format", "-f") and value not in FORMATS:
                return None
        else:
            paths.append(word)
        i += 1
    return paths or None


def main() -> None:
    """``correlate``: start the pool on the inputs when the command line allows it, then run the CLI."""
    argv = sys.argv[1:]
    early = False
    if (COMPLETE_VAR not in os.environ and os.environ.get("CORRELATE_EARLY_POOL", "1") != "0"
            and (os.cpu_count() or 1) > 1):
        inputs = early_inputs(argv)
        if inputs:
            from correlator.extract.engines import speculate

            speculate(inputs)
            early = True
    from correlator.cli import main as cli_main

    try:
        cli_main()
    finally:
        if early:  # what no run took over is of no use now (a usage error): stopped, not waited for
            from correlator.extract.engines import drop_early

            drop_early(now=True)
