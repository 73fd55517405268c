"""The ``correlate`` command: a thin front door over ``correlator.pipeline``.

Parses options, calls the library, picks a renderer, and translates ``CorrelateError`` into one
``error: ...`` line and an exit code (``ExitCode``). No analysis happens here. The lines it prints
itself (errors, rule problems) name files and quote text from logs and rule files: their control
characters are shown as escapes (``correlator.report.safe``), as the renderers do.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path
from typing import Annotated, Literal, get_args, get_origin, get_type_hints

import typer

from correlator.errors import CorrelateError, InputError, RuleError, UsageError
from correlator.launch import COMPLETE_VAR, SUBCOMMANDS
from correlator.model import ExitCode

#: ``-h`` as well as ``--help``, on every command (click's subcommand contexts inherit it)
CONTEXT = {"help_option_names": ["-h", "--help"]}

app = typer.Typer(
    add_completion=True,
    context_settings=CONTEXT,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    help="Name the first failing rank of a distributed training job, why it failed, and which errors are "
         "only collateral. Run 'correlate PATH...' (same as 'correlate analyze PATH...').",
)
rules_app = typer.Typer(help="Inspect and check the failure rules.", no_args_is_help=True)
app.add_typer(rules_app, name="rules")

# Options with a fixed set of values are typed by a Literal: typer shows the choices in --help as
# [a|b|c], offers them to shell completion, and a value outside them is a usage error naming them.
Format = Literal["terminal", "json", "markdown", "html", "trace"]
FORMATS: tuple[str, ...] = get_args(Format)
EngineName = Literal["local", "dask"]
ScannerName = Literal["auto", "hyperscan", "regex"]
ListFormat = Literal["table", "json"]
#: ``correlate history --format`` (``history.RENDERERS``; not imported here: it loads the renderers)
HistoryFormat = Literal["table", "json", "markdown"]


def _line(text: str) -> str:
    """One printed line of ours: what it quotes (a file name with a newline or an escape) cannot act
    on the terminal or start a line of its own."""
    from correlator.report.safe import visible

    return visible(text)


def _fail(e: CorrelateError) -> None:
    code = ExitCode.NO_INPUT if isinstance(e, InputError) else ExitCode.USAGE
    text = f"error: {e}"
    if isinstance(e, RuleError) and e.hint is None:
        text += " (fix or remove that file; 'correlate rules check' lists every problem)"
    typer.echo(_line(text), err=True)
    raise typer.Exit(int(code))


def _write(text: str, output: Path | None) -> None:
    """Write the report to ``output``: to a hidden file beside it, synced, then renamed over it, so
    a full disk or a kill leaves the previous file (or none), never a cut one. A device or FIFO
    (``/dev/stdout``, a pipe) is written in place: it cannot be replaced and holds nothing to keep."""
    if output is None or str(output) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    data = text.encode("utf-8")
    target = Path(os.path.realpath(output))  # through a symlink: the link stays, its target is replaced
    tmp: Path | None = None
    try:
        if target.exists() and not target.is_file():
            if target.is_dir():
                raise IsADirectoryError(21, "Is a directory")
            with open(target, "wb") as f:
                f.write(data)
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        except PermissionError:
            if not os.access(target, os.W_OK):
                raise
            tmp = None  # a writable file in a folder that takes no new file: only in place is possible
            with open(target, "wb") as f:
                f.write(data)
            return
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o7777)  # keep the permissions the file had
        os.replace(tmp, target)
        tmp = None
    except OSError as e:
        kept = " (the file is unchanged)" if target.is_file() else ""
        _fail(UsageError(f"cannot write the report: {e.strerror or e}{kept}", str(output),
                         "free space or pick another --output" if e.errno in (errno.ENOSPC, errno.EDQUOT) else None))
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


@app.command("analyze")
def analyze_cmd(
    paths: Annotated[list[str], typer.Argument(help="Log files, folders (walked), globs, or - for stdin.")],
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = "terminal",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the report to FILE.")] = None,
    parquet: Annotated[Path | None, typer.Option(help="Also append the report to a Parquet dataset in DIR.")] = None,
    rules: Annotated[list[Path] | None, typer.Option("--rules", help="Extra rule folder (repeatable); same ids replace built-in rules.")] = None,
    builtin_rules: Annotated[bool, typer.Option("--builtin-rules/--no-builtin-rules",
                                                 help="Use the built-in rules (--no-builtin-rules: only the --rules folders).")] = True,
    tz: Annotated[str | None, typer.Option(help="Zone of timestamps that carry none (IANA name or UTC; default: this machine's).")] = None,
    engine: Annotated[EngineName, typer.Option(help="local (process pool) or dask.")] = "local",
    scheduler: Annotated[str | None, typer.Option(help="Dask scheduler address (tcp://host:8786); default: a local cluster.")] = None,
    workers: Annotated[int | None, typer.Option("--workers", "-j", help="Local worker processes (default: all cores).")] = None,
    scanner: Annotated[ScannerName, typer.Option(help="regex is the pure-Python fallback.")] = "auto",
    redact: Annotated[bool, typer.Option("--redact/--no-redact", help="Mask secrets (tokens, keys, passwords) in the output.")] = True,
    all_files: Annotated[bool, typer.Option("--all-files", help="Also read files that do not look like logs (.md, .toml, .json...).")] = False,
    job_id: Annotated[str | None, typer.Option(help="Job id for Parquet partitions (default: from slurm-<id> names).")] = None,
    follow: Annotated[bool, typer.Option("--follow", help="Watch growing files; print the verdict as it forms; stop at the job's end or Ctrl-C.")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between --follow checks.")] = 1.0,
    quiet: Annotated[float | None, typer.Option(help="With --follow: stop after this many seconds without new lines.")] = None,
    heartbeat: Annotated[float, typer.Option(help="With --follow: say it is still waiting (sources, bytes read, the "
                                                  "last new line's age) after this many seconds without new lines "
                                                  "(0: never).")] = 15.0,
    color: Annotated[bool | None, typer.Option("--color/--no-color", help="Colour the terminal summary (default: when stdout is a TTY and NO_COLOR is not set).")] = None,
    brief: Annotated[bool, typer.Option("--brief", help="Three lines: the verdict, the root's line, the fix (terminal format).")] = False,
    wall_clock: Annotated[bool, typer.Option("--wall-clock", help="With --format trace: timestamps are UTC wall-clock time (microseconds since the Unix epoch), not time since the first event.")] = False,
    fail_on_failure: Annotated[bool, typer.Option("--fail-on-failure", help="Exit 1 when a root cause or job-level end is found.")] = False,
) -> None:
    """Analyse a job's logs (the default command)."""
    from correlator.pipeline import Options, analyze
    from correlator.report import render

    opts = Options(
        rule_dirs=tuple(str(p) for p in rules or ()), include_builtin_rules=builtin_rules, tz=tz,
        engine=engine, scheduler=scheduler, workers=workers, scanner=None if scanner == "auto" else scanner,
        redact=redact, all_files=all_files, job_id=job_id)
    # NO_COLOR (no-color.org): set and not empty, no colour unless --color asks for it
    use_color = (sys.stdout.isatty() and output is None and not os.environ.get("NO_COLOR")) if color is None else color
    if follow:
        from correlator.follow import follow as run_follow

        try:
            # the live verdict lines go to stdout only when stdout carries the terminal summary
            live = sys.stdout if fmt == "terminal" and output is None else sys.stderr
            report = run_follow(paths, opts, interval_s=interval, out=live, color=use_color and live is sys.stdout,
                                quiet_s=quiet, heartbeat_s=heartbeat or None)
        except CorrelateError as e:
            _fail(e)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
    else:
        progress = None
        if sys.stderr.isatty():
            from correlator.progress import Progress

            progress = Progress(sys.stderr)
        try:
            report = analyze(paths, opts, progress=progress)
        except CorrelateError as e:
            _fail(e)
        except ValueError as e:  # scanner choice and similar option values
            _fail(UsageError(str(e)))
        finally:
            if progress is not None:
                progress.close()
    text = render(report, fmt, **_render_options(fmt, use_color, brief, wall_clock, output, redact))
    _write(text, output)
    if parquet is not None:
        from correlator.report.parquet import write_parquet

        if parquet.exists() and not parquet.is_dir():
            _fail(UsageError("--parquet needs a folder (a dataset), not a file", str(parquet)))
        try:
            write_parquet(report, parquet, report.job.id or "job")
        except CorrelateError as e:  # a bad job id, or a write that failed (it says what was kept)
            _fail(e)
        except OSError as e:
            _fail(UsageError(f"cannot write the Parquet dataset: {e.strerror or e}", str(parquet)))
    if fail_on_failure and report.verdict.value in ("root_cause", "job_level"):
        raise typer.Exit(int(ExitCode.FAILURE_FOUND))


def _render_options(fmt: str, color: bool, brief: bool, wall_clock: bool, output: Path | None,
                    redact: bool) -> dict[str, object]:
    """The renderer's options from the command's: the terminal's width and colour, the command line
    the documents stamp (its secrets masked unless --no-redact), the trace's clock."""
    if fmt == "terminal":
        width = None
        if output is None and sys.stdout.isatty():
            import shutil

            width = shutil.get_terminal_size().columns
        return {"color": color, "brief": brief, "width": width}
    if fmt in ("markdown", "html"):
        import shlex

        command = shlex.join(["correlate", *sys.argv[1:]])
        if redact:
            from correlator.report.redact import redact as mask

            command = mask(command)
        return {"command": command}
    if fmt == "trace":
        return {"wall_clock": wall_clock}
    return {}


@rules_app.command("check")
def rules_check(
    rules: Annotated[list[Path] | None, typer.Option("--rules", help="Extra rule folder to check (repeatable).")] = None,
    builtin_rules: Annotated[bool, typer.Option("--builtin-rules/--no-builtin-rules",
                                                 help="Check the built-in rules too (--no-builtin-rules: only the --rules folders).")] = True,
    entries: Annotated[bool, typer.Option("--entries", help="Only check that every entry is complete and its references "
                                                             "pinned; exit 1 if one is not.")] = False,
) -> None:
    """Validate every rule file, lint them, run every example on both scanners and the benign corpus."""
    from correlator import rulecheck

    if entries:
        loaded, problems = rulecheck.load_all(list(rules or ()), builtin_rules)
        problems += rulecheck.check_entries(loaded)
    else:
        loaded, problems = rulecheck.check_all(list(rules or ()), builtin_rules)
    errors = [p for p in problems if p.level == "error"]
    for p in problems:
        typer.echo(_line(f"{p.level}: {p}"), err=p.level == "error")
    if entries:
        bad = {p.path for p in errors}
        typer.echo(f"{len(loaded) - len(bad & {r.path for r in loaded})} of {len(loaded)} entries complete: "
                   f"{'ok' if not errors else f'{len(errors)} problem(s) in {len(bad)} file(s)'}")
    else:
        n_ex = sum(len(r.examples) for r in loaded)
        cats = len({r.category for r in loaded})
        typer.echo(f"{len(loaded)} rules in {cats} categories, {n_ex} examples: "
                   f"{'ok' if not errors else f'{len(errors)} problem(s)'}")
    if errors:
        raise typer.Exit(1)


@rules_app.command("list")
def rules_list(
    category: Annotated[str | None, typer.Option(help="Only this category.")] = None,
    role: Annotated[str | None, typer.Option(help="Only this role (primary, collateral, teardown, job, context).")] = None,
    tag: Annotated[str | None, typer.Option(help="Only rules with this tag.")] = None,
    fmt: Annotated[ListFormat, typer.Option("--format", "-f",
                                            help="Output format (the JSON fields are in rules/README.md).")] = "table",
    rules: Annotated[list[Path] | None, typer.Option("--rules", help="Extra rule folder (repeatable).")] = None,
) -> None:
    """List the rules: id, role, severity, title (or every listed field as JSON)."""
    from correlator.explain import list_json, list_table
    from correlator.model import Role
    from correlator.ruleset import load_rules

    if role is not None and role not in {r.value for r in Role}:
        _fail(UsageError(f"unknown role {role!r}: use one of {', '.join(r.value for r in Role)}"))
    try:
        loaded = load_rules(list(rules or ()))
    except RuleError as e:
        _fail(e)
    categories = sorted({r.category for r in loaded})
    if category is not None and category not in categories:
        _fail(UsageError(f"unknown category {category!r}: use one of {', '.join(categories)}"))
    tags = sorted({t for r in loaded for t in r.tags})
    if tag is not None and tag not in tags:
        import difflib

        near = difflib.get_close_matches(tag, tags, n=5, cutoff=0.6)
        _fail(UsageError(f"unknown tag {tag!r}" + (f" (did you mean {', '.join(near)}?)" if near else "")
                         + f": no rule has it; the {len(tags)} tags are in 'correlate rules list --format json'"))
    shown = [r for r in loaded if (category is None or r.category == category)
             and (role is None or r.role == role) and (tag is None or tag in r.tags)]
    if fmt == "json":
        sys.stdout.write(list_json(shown, len(loaded)))
        return
    sys.stdout.write(list_table(shown))
    typer.echo(f"{len(shown)} of {len(loaded)} rules", err=True)


@rules_app.command("explain")
def rules_explain(
    rule_id: Annotated[str, typer.Argument(help="A rule id, e.g. storage.eio-on-checkpoint-save.")],
    rules: Annotated[list[Path] | None, typer.Option("--rules", help="Extra rule folder (repeatable).")] = None,
) -> None:
    """Print a rule's whole encyclopedia entry."""
    from correlator.ruleset import load_rules

    try:
        loaded = {r.id: r for r in load_rules(list(rules or ()))}
    except RuleError as e:
        _fail(e)
    r = loaded.get(rule_id)
    if r is None:
        near = [i for i in loaded if rule_id.split(".")[-1] in i][:5]
        _fail(UsageError(f"no rule {rule_id!r}" + (f" (did you mean {', '.join(near)}?)" if near else ""),
                         hint="list them with 'correlate rules list'"))
        return
    from correlator.explain import explain

    typer.echo(explain(r))


@rules_app.command("site")
def rules_site(
    directory: Annotated[Path, typer.Argument(help="Folder to write the site into (created if needed).")],
    rules: Annotated[list[Path] | None, typer.Option("--rules", help="Extra rule folder (repeatable).")] = None,
) -> None:
    """Write the rules as a static web site: a page per rule, indexes by category and by message, offline search."""
    from correlator.ruleset import load_rules
    from correlator.site import write_site

    if directory.exists() and not directory.is_dir():
        _fail(UsageError("the site needs a folder, not a file", str(directory)))
    try:
        loaded = load_rules(list(rules or ()))
    except RuleError as e:
        _fail(e)
    try:
        write_site(loaded, directory)
    except OSError as e:
        _fail(UsageError(f"cannot write the site: {e.strerror or e}", str(directory)))
    typer.echo(f"{len(loaded)} rule pages, index.html and messages.html written to {directory}", err=True)
    typer.echo(str(directory / "index.html"))


@app.command("history")
def history_cmd(
    directory: Annotated[Path, typer.Argument(help="A Parquet dataset written with --parquet.")],
    fmt: Annotated[HistoryFormat, typer.Option("--format", "-f", help="Output format.")] = "table",
    since: Annotated[str | None, typer.Option(help="Only jobs since a date (2026-03-01, 2026-03-01T14:00Z) or for "
                                                      "a duration back from now (36h, 7d, 2w).")] = None,
    node: Annotated[str | None, typer.Option(help="Only jobs that ran on this host (a rank on it, or their root).")] = None,
) -> None:
    """Summarise failures across jobs: by category and rule, and nodes that were the root more than once."""
    from correlator import history

    if not directory.is_dir():
        _fail(InputError("no such Parquet dataset folder", str(directory), "write one with 'correlate ... --parquet DIR'"))
    try:
        summary = history.summarize(directory, since=history.parse_since(since) if since is not None else None,
                                    node=node)
        text = history.render(summary, fmt)
        for d in summary.diagnostics:  # what was left out, on stderr, so the summary stays parseable
            typer.echo(_line(f"{'note' if d.level == 'info' else 'warning'}: {d.path}: {d.message}"), err=True)
    except CorrelateError as e:
        _fail(e)
    except (OSError, ValueError, KeyError) as e:
        _fail(InputError(f"cannot read the dataset ({type(e).__name__}: {e})", str(directory),
                         "point at a folder written with 'correlate ... --parquet DIR'"))
    typer.echo(text, nl=False)


@app.command("serve")
def serve_cmd(
    directory: Annotated[Path, typer.Argument(help="The folder whose logs the console may read (default: this one).")] = Path("."),
    host: Annotated[str, typer.Option(help="Address to listen on (loopback by default: only this machine).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on; 0 takes a free one (the URL is printed).")] = 8765,
    parquet: Annotated[Path | None, typer.Option(help="A Parquet dataset (written with --parquet): the jobs page reads it.")] = None,
    max_upload: Annotated[int, typer.Option(help="Largest upload, in MiB.")] = 1024,
    rules: Annotated[list[Path] | None, typer.Option("--rules", help="Extra rule folder (repeatable); same ids replace built-in rules.")] = None,
    tz: Annotated[str | None, typer.Option(help="Zone of timestamps that carry none (IANA name or UTC; default: this machine's).")] = None,
    workers: Annotated[int | None, typer.Option("--workers", "-j", help="Worker processes of an analysis (default: all cores).")] = None,
) -> None:
    """A local web console: drop log files or pick a folder, read the HTML report; a jobs page over a dataset."""
    from correlator.pipeline import Options
    from correlator.serve import ServeConfig, serve

    if parquet is not None and parquet.exists() and not parquet.is_dir():
        _fail(UsageError("--parquet needs a folder (a dataset), not a file", str(parquet)))
    if max_upload <= 0:
        _fail(UsageError("--max-upload must be a positive number of MiB"))
    config = ServeConfig(root=directory, dataset=parquet.resolve() if parquet is not None else None,
                         options=Options(rule_dirs=tuple(str(p) for p in rules or ()), tz=tz, workers=workers),
                         max_upload_bytes=max_upload << 20)
    try:
        serve(config, host, port)
    except CorrelateError as e:
        _fail(e)


Shell = Literal["bash", "zsh", "fish", "powershell"]


@app.command("completion")
def completion_cmd(
    shell: Annotated[Shell, typer.Argument(help="The shell to complete in.")],
) -> None:
    """Print the shell completion script: eval "$(correlate completion bash)" in ~/.bashrc (or
    'correlate --install-completion' installs it for the shell you are in)."""
    from typer._completion_shared import get_completion_script

    typer.echo(get_completion_script(prog_name="correlate", complete_var=COMPLETE_VAR, shell=shell))




def _complete_as_analyze(env: dict[str, str]) -> None:
    """Completion of ``correlate PATH --fo<TAB>``: the words are those of ``correlate analyze PATH
    --fo`` (as ``main`` reads the command line). bash passes the words in ``COMP_WORDS`` and the
    index of the one completed in ``COMP_CWORD``; zsh, fish and PowerShell the line in
    ``_TYPER_COMPLETE_ARGS``. Nothing changes while the first word is being typed."""
    if "COMP_WORDS" in env and "COMP_CWORD" in env:
        words, cword = env["COMP_WORDS"].split(" "), int(env["COMP_CWORD"] or 0)
        if cword >= 2 and len(words) > 1 and words[1] not in SUBCOMMANDS:
            env["COMP_WORDS"] = " ".join([words[0], "analyze", *words[1:]])
            env["COMP_CWORD"] = str(cword + 1)
    elif "_TYPER_COMPLETE_ARGS" in env:
        line = env["_TYPER_COMPLETE_ARGS"]
        words = line.split()
        if len(words) >= 2 and words[1] not in SUBCOMMANDS and (len(words) > 2 or line.endswith(" ")):
            head, _, rest = line.partition(" ")
            env["_TYPER_COMPLETE_ARGS"] = f"{head} analyze {rest}"


#: options of ``analyze`` that change only the report's form and destination, not the analysis
_PLAIN = {"paths", "fmt", "output", "parquet", "color", "fail_on_failure", "job_id", "redact", "brief", "wall_clock"}


def _plain_analyze(args: list[str]) -> dict[str, object] | None:
    """The arguments of ``correlate analyze ARGS`` when they are paths and ``_PLAIN`` options only,
    split by click's parser of the same typer command (so they cannot be read differently), or
    None (then typer parses them as usual). Their values are strings, flags and paths: nothing
    to coerce, so typer's coercion (it imports pydantic: ~0.15 s) is skipped."""
    try:
        from typer.main import get_command

        group = get_command(app)
        # (a click Group; typer >= 0.25 carries its own copy of click, whose classes are not click's)
        commands = getattr(group, "commands", None)
        if not isinstance(commands, dict) or "analyze" not in commands:
            return None
        cmd = commands["analyze"]
        values, extra, _order = cmd.make_parser(cmd.context_class(cmd, info_name="analyze")).parse_args(args=args)
    except Exception:  # noqa: BLE001 - a usage error: typer's parse reports it
        return None
    if extra or not values.get("paths") or set(values) - _PLAIN:
        return None
    for name, hint in get_type_hints(analyze_cmd).items():  # a value outside its choices: typer's parse says so
        if get_origin(hint) is Literal and values.get(name) not in (None, *get_args(hint)):
            return None
    for key in ("output", "parquet"):
        if values.get(key) is not None:
            values[key] = Path(str(values[key]))
    values["paths"] = [str(p) for p in values["paths"]]
    return values


def _analyze_plain(values: dict[str, object]) -> None:
    """Run ``analyze_cmd`` with ``values`` (from ``_plain_analyze``) and its defaults for the rest.

    Before that, for a job for the local pool, extraction is started at once (see
    ``engines.speculate``): the workers read the files while this process loads the rules."""
    import inspect

    kwargs = {name: p.default for name, p in inspect.signature(analyze_cmd).parameters.items()
              if p.default is not inspect.Parameter.empty}
    kwargs.update(values)
    paths = kwargs["paths"]
    early = ("-" not in paths and kwargs["fmt"] in FORMATS and os.environ.get("CORRELATE_EARLY_POOL", "1") != "0"
             and (os.cpu_count() or 1) > 1)
    if early:
        from correlator.extract.engines import speculate

        speculate(list(paths))
    try:
        analyze_cmd(**kwargs)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        if early:  # Ctrl-C while the early workers read: they stop now
            from correlator.extract.engines import drop_early

            drop_early(now=True)
        raise
    finally:
        if early:  # whatever stopped the analysis, work started early is not waited for
            from correlator.extract.engines import drop_early

            drop_early()


try:  # the exceptions of the click typer runs on (typer >= 0.25 carries its own copy of click)
    from typer._click import exceptions as _usage
except ImportError:  # pragma: no cover - an older typer, on click itself
    from click import exceptions as _usage  # type: ignore[no-redef]


def main() -> None:
    """Entry point: ``correlate PATH...`` means ``correlate analyze PATH...``."""
    argv = sys.argv[1:]
    if COMPLETE_VAR in os.environ:
        _complete_as_analyze(os.environ)  # type: ignore[arg-type]
    if argv and argv[0] == "--version":
        from correlator import __version__

        print(f"correlate {__version__}")
        return
    if argv and argv[0] not in SUBCOMMANDS:
        argv = ["analyze", *argv]
    plain = _plain_analyze(argv[1:]) if argv and argv[0] == "analyze" else None
    try:
        if plain is not None:
            _analyze_plain(plain)
            return
        code = app(args=argv, prog_name="correlate", standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except _usage.NoArgsIsHelpError as e:  # 'correlate rules': its help (rich prints it as it is made)
        if e.format_message().strip():
            typer.echo(e.format_message())
    except _usage.UsageError as e:  # a bad option or value: one line, as our own errors
        message = e.format_message().replace("Value error, ", "").rstrip(".")
        where = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
        typer.echo(_line(f"error: {message[:1].lower()}{message[1:]}{where}"), err=True)
        sys.exit(int(ExitCode.USAGE))
    except typer.Abort:  # typer's answer to an end of input at a prompt, or to Ctrl-C
        sys.exit(130)
    except BrokenPipeError:  # stdout closed early ('| head'): nothing more to say, as click does
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - the interpreter's final flush goes there
        sys.exit(1)
    except KeyboardInterrupt:
        if argv and argv[0] == "analyze":
            # the workers are stopped and every file this run writes was finished or removed while
            # the interrupt unwound; the interpreter's exit would only wait on the stopped pool's
            # threads (and print their complaint about it)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - a bug: one line, not a traceback of megabytes of locals
        print(_line(f"error: internal error ({type(e).__name__}: {e}); please report it with the command line "
                    f"(CORRELATE_TRACEBACK=1 shows the traceback)"), file=sys.stderr)
        if os.environ.get("CORRELATE_TRACEBACK"):
            raise
        sys.exit(int(ExitCode.INTERNAL))
