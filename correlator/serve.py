"""``correlate serve [DIR]``: a local web console over the analyzer and a Parquet dataset.

This module owns the console: its HTTP server (the standard library's ``ThreadingHTTPServer``),
its pages, the upload of log files (``multipart/form-data``, parsed here as a stream to disk: the
``cgi`` module is gone since Python 3.13) and the rules for which files on the machine it may read.
It runs ``pipeline.analyze`` and shows the report the HTML renderer made (``report.html``: log text
escaped, secrets masked before any renderer saw it); its jobs page reads the dataset through
``history.summarize`` and ``report.parquet.read_tables``. It never analyses anything itself.

What it does not let a request do:

- choose a path: an uploaded file's name is cut into safe components (letters, digits, ``._+@=,-``;
  no empty, hidden, ``.`` or ``..`` component) and written below a fresh temporary folder with
  ``O_EXCL | O_NOFOLLOW``, which is removed after the analysis;
- read outside the served folder: a folder or file named in the form is read only when its resolved
  path is that folder or below it, and only a folder or a regular file (a FIFO would block the run);
  the walk below it follows no symbolic link that leaves it (``extract.sources.walk``);
- grow without bound: a request body over ``--max-upload`` is refused before it is read, and so is
  an upload of more than ``MAX_FILES`` files or a form field over ``MAX_FIELD``;
- act for another web site: the server answers only requests whose ``Host`` is its own loopback
  address (no DNS rebinding) and takes a form only with the console's token (no cross-site post).

Pages load nothing from anywhere: CSS and the one script (the drop zone) are inline, a
Content-Security-Policy allows only that script (by nonce) and requests to this server.
"""

from __future__ import annotations

import html
import json
import os
import re
import secrets
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath
from typing import IO, Any, Protocol
from urllib.parse import parse_qs, quote, urlsplit

from correlator.errors import CorrelateError, InputError, UsageError
from correlator.model import Report
from correlator.pipeline import Options
from correlator.report.redact import redact
from correlator.report.safe import visible

#: files one upload may hold (a 4096-rank job with one file per rank and stream fits)
MAX_FILES = 20_000
#: bytes of one ordinary form field (a path, a job id, the token)
MAX_FIELD = 64 * 1024
#: bytes of one part's headers
MAX_PART_HEADERS = 16 * 1024
#: an uploaded name keeps at most this many folder levels (its last ones: a torchelastic log dir
#: needs ``attempt_<n>/<local rank>/stdout.log``) and this many characters a level
MAX_NAME_DEPTH = 12
MAX_NAME_CHARS = 120
#: reports the console keeps in memory (the oldest is dropped first)
KEEP_REPORTS = 32
#: rows of a job's timeline on its dataset page
JOB_EVENTS_LIMIT = 500
#: jobs listed on the jobs page (the latest first; the summaries above it count every job)
JOBS_LIMIT = 1000
#: entries of the served folder listed on the first page
LIST_LIMIT = 300
#: seconds a connection may stay silent before it is closed (a stalled upload frees its thread)
SOCKET_TIMEOUT_S = 120
#: default ``--max-upload``, in MiB
DEFAULT_MAX_UPLOAD_MB = 1024
#: bytes an upload may hold besides its files' (part headers, the form's fields)
UPLOAD_OVERHEAD = 1 << 20
#: a refused body is read to its end (so that the browser shows the answer) when this much is left
DRAIN_LIMIT = 64 << 20

_CHUNK = 1 << 16
_UNSAFE_CHAR = re.compile(r"[^A-Za-z0-9._+@=,-]")
_PARAM = re.compile(r';\s*([A-Za-z0-9_.*-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;]*)')
_BCHARS = re.compile(r"^[0-9A-Za-z'()+_,\-./:=? ]{1,70}$")
_TOKEN_ID = re.compile(r"^[A-Za-z0-9_-]{8,64}$")
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class Readable(Protocol):
    """What a request body is read from: a socket's file, a ``_Body``, ``io.BytesIO``."""

    def read(self, n: int = ..., /) -> bytes: ...


class UploadError(ValueError):
    """A request body the console will not take; ``status`` is the HTTP answer."""

    def __init__(self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(message)
        self.status = status


# --- names and paths -----------------------------------------------------------------------------


def upload_name(raw: str, index: int) -> PurePosixPath:
    """The relative path an uploaded file is written at, from the name the browser sent.

    A folder upload sends ``job/attempt_0/3/stdout.log``; the folders are kept (a log's identity can
    be in them) but every component is cut to safe characters, and empty, hidden, ``.`` and ``..``
    components go. A name with nothing left is ``upload-<index>``."""
    parts = []
    for piece in re.split(r"[/\\]", raw):
        piece = _UNSAFE_CHAR.sub("_", piece).lstrip(".")[:MAX_NAME_CHARS]
        if piece:
            parts.append(piece)
    parts = parts[-MAX_NAME_DEPTH:]
    return PurePosixPath(*parts) if parts else PurePosixPath(f"upload-{index}")


def _inside(real: str, base: str) -> bool:
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def resolve_under(root: Path, text: str) -> Path:
    """The resolved path of ``text`` (relative to ``root``, or absolute) when it is ``root`` or
    below it and is a folder or a regular file; else ``UsageError`` saying why.

    Symbolic links are resolved first, so a link inside ``root`` that leads out is refused."""
    text = text.strip()
    if not text:
        raise UsageError("name a folder or file to read", hint=f"a path below {root}")
    if "\x00" in text:
        raise UsageError("a path cannot hold a NUL character")
    base = os.path.realpath(root)
    candidate = os.path.join(base, os.path.expanduser(text) if text.startswith("~") else text)
    real = os.path.realpath(candidate)
    if not _inside(real, base):
        raise UsageError(f"{text!r} is not below the served folder {base}",
                         hint="the console reads only what is below the folder it was started on "
                              "(correlate serve DIR); upload the files instead, or start it on a folder that holds them")
    try:
        st = os.stat(real)
    except OSError as e:
        raise UsageError(f"cannot read {text!r}: {e.strerror or e}", str(real)) from None
    if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        raise UsageError(f"{text!r} is neither a folder nor a regular file", str(real))
    return Path(real)


# --- multipart/form-data -------------------------------------------------------------------------


@dataclass(slots=True)
class Form:
    """A parsed form: its ordinary fields, and the files written (relative paths under ``dest``)."""

    fields: dict[str, list[str]] = field(default_factory=dict)
    files: list[PurePosixPath] = field(default_factory=list)
    file_bytes: int = 0

    def first(self, name: str, default: str = "") -> str:
        values = self.fields.get(name)
        return values[0] if values else default


def _params(header: str) -> tuple[str, dict[str, str]]:
    """``form-data; name="a"; filename="b"`` -> ("form-data", {"name": "a", "filename": "b"})."""
    value, _, rest = header.partition(";")
    out: dict[str, str] = {}
    for m in _PARAM.finditer(";" + rest):
        key, raw = m.group(1).lower(), m.group(2).strip()
        if raw.startswith('"') and raw.endswith('"') and len(raw) >= 2:
            raw = re.sub(r"\\(.)", r"\1", raw[1:-1])
        out.setdefault(key, raw)
    return value.strip().lower(), out


def boundary_of(content_type: str) -> bytes:
    kind, params = _params(content_type or "")
    if kind != "multipart/form-data":
        raise UploadError("send the files as multipart/form-data (the page's form does)", HTTPStatus.UNSUPPORTED_MEDIA_TYPE)
    boundary = params.get("boundary", "")
    if not _BCHARS.match(boundary) or boundary.endswith(" "):
        raise UploadError("the multipart boundary is missing or not a valid one")
    return boundary.encode("ascii")


class _Body:
    """Exactly ``length`` bytes of a request body, read in pieces; a body cut short is an error."""

    def __init__(self, stream: Readable, length: int) -> None:
        self.stream, self.left = stream, length

    def read(self, n: int = _CHUNK) -> bytes:
        if self.left <= 0:
            return b""
        chunk = self.stream.read(min(n, self.left))
        if not chunk:
            raise UploadError("the upload was cut off before its end (the browser stopped sending)")
        self.left -= len(chunk)
        return chunk


class _Parts:
    """The parts of a multipart body, scanned as a stream with a bounded buffer."""

    def __init__(self, body: _Body, boundary: bytes) -> None:
        self.body = body
        self.delim = b"\r\n--" + boundary
        self.buf = bytearray(b"\r\n")  # so that the first delimiter looks like every other one

    def _more(self) -> bool:
        chunk = self.body.read()
        self.buf += chunk
        return bool(chunk)

    def copy_until_delimiter(self, sink: Callable[[bytes], None]) -> None:
        """Pass everything before the next delimiter to ``sink`` and drop the delimiter."""
        keep = len(self.delim) - 1
        start = 0
        while True:
            i = self.buf.find(self.delim, start)
            if i >= 0:
                if i:
                    sink(bytes(self.buf[:i]))
                del self.buf[:i + len(self.delim)]
                return
            if len(self.buf) > keep:  # all but a tail that may be the delimiter's start
                sink(bytes(self.buf[:-keep]))
                del self.buf[:-keep]
            start = 0
            if not self._more():
                raise UploadError("the upload ended inside a part (no closing boundary)")

    def after_delimiter(self) -> bool:
        """After a delimiter: True when a part follows, False at the closing one (``--``)."""
        while len(self.buf) < 2:
            if not self._more():
                raise UploadError("the upload ended right after a boundary")
        if self.buf[:2] == b"--":
            return False
        while True:  # transport padding (spaces, tabs) may stand before the line end
            j = self.buf.find(b"\r\n")
            if j >= 0:
                if self.buf[:j].strip(b" \t"):
                    raise UploadError("a multipart boundary is followed by text")
                del self.buf[:j + 2]
                return True
            if len(self.buf) > 256 or not self._more():
                raise UploadError("a multipart boundary line does not end")

    def headers(self) -> dict[str, str]:
        while True:
            j = self.buf.find(b"\r\n\r\n")
            if j > MAX_PART_HEADERS:
                raise UploadError("a part's headers are too long")
            if j >= 0:
                block = bytes(self.buf[:j])
                del self.buf[:j + 4]
                break
            if len(self.buf) > MAX_PART_HEADERS:
                raise UploadError("a part's headers are too long")
            if not self._more():
                raise UploadError("the upload ended inside a part's headers")
        out: dict[str, str] = {}
        for line in block.decode("utf-8", "replace").split("\r\n"):
            name, sep, value = line.partition(":")
            if sep:
                out[name.strip().lower()] = value.strip()
        return out


class _Sink:
    """Where one part's bytes go (a file, or a list for a field), refusing more than ``limit`` of them."""

    def __init__(self, limit: int, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST,
                 out: IO[bytes] | None = None) -> None:
        self.limit, self.message, self.status, self.out = limit, message, status, out
        self.size = 0
        self.chunks: list[bytes] = []

    def __call__(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise UploadError(self.message, self.status)
        if self.out is not None:
            self.out.write(data)
        else:
            self.chunks.append(data)


def parse_multipart(stream: Readable, content_type: str, length: int, dest: Path, *,
                    max_bytes: int, max_files: int = MAX_FILES) -> Form:
    """Read a ``multipart/form-data`` body of ``length`` bytes from ``stream``: ordinary fields into
    memory (``MAX_FIELD`` each), files to disk below the existing empty folder ``dest`` under
    ``upload_name``s (their bytes together at most ``max_bytes``; at most ``max_files`` of them).
    Raises ``UploadError`` for anything malformed or over a limit."""
    parts = _Parts(_Body(stream, length), boundary_of(content_type))
    form = Form()
    parts.copy_until_delimiter(lambda _preamble: None)
    dest_real = os.path.realpath(dest)
    while parts.after_delimiter():
        headers = parts.headers()
        disposition, params = _params(headers.get("content-disposition", ""))
        if disposition != "form-data" or "name" not in params:
            raise UploadError("a part of the upload has no form-data name")
        filename = params.get("filename")
        if filename is None:  # an ordinary field
            field_sink = _Sink(MAX_FIELD, f"the form field {params['name'][:40]!r} is over {MAX_FIELD // 1024} KiB")
            parts.copy_until_delimiter(field_sink)
            form.fields.setdefault(params["name"], []).append(b"".join(field_sink.chunks).decode("utf-8", "replace"))
            continue
        if len(form.files) >= max_files:
            raise UploadError(f"more than {max_files} files in one upload", HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
        rel, fd = _create(dest, dest_real, upload_name(filename, len(form.files)))
        with os.fdopen(fd, "wb") as out:
            file_sink = _Sink(max_bytes - form.file_bytes, f"the files are over the upload limit of "
                              f"{max_bytes // (1 << 20)} MiB", HTTPStatus.REQUEST_ENTITY_TOO_LARGE, out)
            parts.copy_until_delimiter(file_sink)
        written = file_sink.size
        if not filename and not written:  # a file input left empty sends one nameless empty part
            (dest / rel).unlink()
            continue
        form.file_bytes += written
        form.files.append(rel)
    return form


def _create(dest: Path, dest_real: str, rel: PurePosixPath) -> tuple[PurePosixPath, int]:
    """Create ``dest/rel`` (its folders too) for writing, never over another file and never through a
    link; a name already taken gets ``~2``, ``~3``... A component that is a file where a folder is
    needed puts the file at the top with its folders joined by ``_``."""
    target = rel
    try:
        for parent in reversed(rel.parents[:-1]):
            folder = dest / parent
            if not folder.is_dir() or folder.is_symlink():
                os.mkdir(folder, 0o700)
    except OSError:
        target = PurePosixPath("_".join(rel.parts))
    for n in range(1, 10_000):
        name = target if n == 1 else target.with_name(f"{target.name}~{n}")
        path = dest / name
        if not _inside(os.path.realpath(path.parent), dest_real):
            raise UploadError("an uploaded name leads outside the upload folder")
        try:
            return name, os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except (FileExistsError, IsADirectoryError):
            continue
    raise UploadError("too many files of the same name in one upload")


def parse_urlencoded(stream: Readable, length: int) -> dict[str, list[str]]:
    if length > MAX_FIELD * 4:
        raise UploadError("the form is too large", HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
    body = _Body(stream, length)
    data = b""
    while len(data) < length:
        data += body.read(length - len(data))
    return parse_qs(data.decode("utf-8", "replace"), keep_blank_values=True, max_num_fields=64)


# --- the console's state -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServeConfig:
    root: Path
    dataset: Path | None = None
    options: Options = Options()
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_MB << 20
    max_files: int = MAX_FILES


@dataclass(slots=True)
class Kept:
    """A report the console made: what was read, the Report, and its HTML page once rendered."""

    report: Report
    source: str
    made: float
    page: str | None = None
    #: what happened to the job in the dataset, shown above the report, and whether it went wrong
    note: str = ""
    note_failed: bool = False


class Console:
    """What the handlers share: the configuration, the reports made, the form token, one
    analysis at a time (the machine's cores go to the analysis's own workers)."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.root = Path(os.path.realpath(config.root))
        self.token = secrets.token_urlsafe(24)
        self.reports: OrderedDict[str, Kept] = OrderedDict()
        self.lock = threading.Lock()
        self.analysis = threading.Lock()
        self.scratch = Path(tempfile.mkdtemp(prefix="correlate-serve-"))
        self.allowed_hosts: set[str] = set()

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)

    def keep(self, report: Report, source: str) -> str:
        key = secrets.token_urlsafe(12)
        with self.lock:
            self.reports[key] = Kept(report, source, time.time())
            while len(self.reports) > KEEP_REPORTS:
                self.reports.popitem(last=False)
        return key

    def kept(self, key: str) -> Kept | None:
        with self.lock:
            return self.reports.get(key)

    def analyze(self, paths: list[str], source: str, job_id: str = "", add: bool = False, strip: str = "") -> str:
        """Analyse ``paths``, keep the report, append it to the dataset when asked; the report's key.
        ``strip`` is a folder whose name is taken out of every path the report shows."""
        from correlator.pipeline import analyze

        opts = self.config.options
        if job_id:
            from dataclasses import replace

            opts = replace(opts, job_id=job_id)
        with self.analysis:
            try:
                report = analyze(paths, opts)
            except ValueError as e:  # option values (a scanner choice) the pipeline refuses
                raise UsageError(str(e)) from None
        if strip:  # an upload's files are named as the browser sent them, not by the temporary folder
            from correlator.report.redact import map_strings

            prefix = strip.rstrip(os.sep) + os.sep
            report = map_strings(report, lambda text: text.replace(prefix, "") if prefix in text else text)
        key = self.keep(report, source)
        if add:  # a dataset that cannot take the job loses the analysis no more: the report says why
            try:
                self._append(report, job_id)
                note = ""
            except CorrelateError as e:
                note = f"not added to the dataset: {e}"
            kept = self.kept(key)
            if kept is not None:
                kept.note = note or f"added to the dataset {self.config.dataset}"
                kept.note_failed = bool(note)
        return key

    def _append(self, report: Report, job_id: str) -> None:
        from correlator.report.parquet import write_parquet

        dataset = self.config.dataset
        if dataset is None:
            raise UsageError("no dataset to add the job to", hint="start the console with --parquet DIR")
        name = job_id or report.job.id
        if not name:
            raise UsageError("the logs name no job id: give one in the form to add the job to the dataset")
        try:
            write_parquet(report, dataset, name)
        except OSError as e:
            raise UsageError(f"cannot write the Parquet dataset: {e.strerror or e}", str(dataset)) from None

    def page_of(self, key: str) -> str | None:
        kept = self.kept(key)
        if kept is None:
            return None
        if kept.page is None:
            from correlator.report import render

            kept.page = _with_console_bar(render(kept.report, "html"), key, kept.source, kept.note, kept.note_failed)
        return kept.page


# --- pages ---------------------------------------------------------------------------------------


def _e(text: object) -> str:
    """Text from logs, a dataset or a user as HTML: controls made visible, secrets masked, escaped."""
    return html.escape(visible(redact(str(text))), quote=True)


_CSS = """
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; margin: 0 auto;
       max-width: 1200px; padding: 16px 24px 48px; color: #1d232b; background: #fff; }
h1 { font-size: 22px; margin: 8px 0 4px; } h2 { font-size: 17px; margin: 26px 0 8px; border-bottom: 1px solid #dde3ea; }
a { color: #0b5cad; } code, .mono { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12.5px; }
nav.top { display: flex; gap: 18px; align-items: baseline; border-bottom: 1px solid #dde3ea; padding-bottom: 8px; }
nav.top b { font-size: 15px; }
.sub { color: #57606a; font-size: 13px; }
.drop { border: 2px dashed #8c959f; border-radius: 8px; padding: 22px; text-align: center; margin: 10px 0; background: #fafbfc; }
.drop.over { border-color: #0b5cad; background: #eef5fd; }
.row { display: flex; gap: 10px; align-items: center; flex-wrap: wrap; margin: 8px 0; }
input[type=text] { min-width: 360px; padding: 4px 6px; font-size: 14px; }
button { font-size: 14px; padding: 4px 12px; }
.error { background: #fdecec; border-left: 6px solid #c62828; padding: 10px 14px; margin: 10px 0; white-space: pre-wrap; }
.note { background: #fff6e0; border-left: 6px solid #b7791f; padding: 8px 12px; margin: 8px 0; }
.status { color: #57606a; min-height: 1.2em; }
.banner { padding: 10px 14px; border-radius: 6px; font-size: 16px; font-weight: 600; margin: 8px 0; }
.v-root_cause { background: #fdecec; border-left: 6px solid #c62828; }
.v-job_level { background: #f1ecfb; border-left: 6px solid #6a3fb5; }
.v-no_failure { background: #e9f6ec; border-left: 6px solid #2e7d32; }
.v-undetermined { background: #fff6e0; border-left: 6px solid #b7791f; }
table.t { border-collapse: collapse; font-size: 13px; margin: 6px 0; }
table.t th, table.t td { border: 1px solid #e3e8ee; padding: 3px 7px; text-align: left; vertical-align: top; }
table.t th { background: #f5f7fa; } table.t td.num { text-align: right; }
table.t td.txt { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12px; word-break: break-all; max-width: 560px; }
ul.entries { columns: 3; font-size: 14px; } ul.entries li form { display: inline; }
button.link { background: none; border: none; padding: 0; color: #0b5cad; text-decoration: underline; cursor: pointer; font-size: 14px; }
"""

_SCRIPT = """
(function () {
  var zone = document.getElementById('drop'), form = document.getElementById('upload');
  var status = document.getElementById('status'), limit = Number(form.dataset.limit);
  function say(text, bad) { status.textContent = text; status.className = bad ? 'status error' : 'status'; }
  function send(items) {
    var total = items.reduce(function (n, it) { return n + it[0].size; }, 0);
    if (!items.length) { say('No file was dropped.', true); return; }
    if (total > limit) { say('These files are ' + Math.ceil(total / 1048576) + ' MiB: over the console\\'s limit of '
                             + Math.floor(limit / 1048576) + ' MiB (start it with a larger --max-upload).', true); return; }
    var data = new FormData();
    data.append('token', form.elements.token.value);
    ['job_id', 'add'].forEach(function (k) { var el = form.elements[k];
      if (el && (el.type !== 'checkbox' || el.checked)) data.append(k, el.value); });
    items.forEach(function (it) { data.append('files', it[0], it[1]); });
    say('Uploading and analysing ' + items.length + ' file(s)...');
    fetch('/analyze', { method: 'POST', body: data, headers: { 'X-Console': '1' } })
      .then(function (r) { return r.json(); })
      .then(function (answer) { if (answer.report) { location.href = answer.report; } else { say(answer.error, true); } })
      .catch(function (e) { say('The upload failed: ' + e, true); });
  }
  function walk(entry, prefix, out) {
    return new Promise(function (done) {
      if (entry.isFile) { entry.file(function (f) { out.push([f, prefix + f.name]); done(); }, function () { done(); }); return; }
      var reader = entry.createReader(), all = [];
      (function next() {
        reader.readEntries(function (batch) {
          if (!batch.length) {
            Promise.all(all.map(function (e) { return walk(e, prefix + entry.name + '/', out); })).then(done); return;
          }
          all = all.concat(Array.from(batch)); next();
        }, function () { done(); });
      })();
    });
  }
  ['dragenter', 'dragover'].forEach(function (t) { zone.addEventListener(t, function (ev) {
    ev.preventDefault(); zone.classList.add('over'); }); });
  zone.addEventListener('dragleave', function () { zone.classList.remove('over'); });
  zone.addEventListener('drop', function (ev) {
    ev.preventDefault(); zone.classList.remove('over');
    var out = [], entries = Array.from(ev.dataTransfer.items || []).map(function (i) {
      return i.webkitGetAsEntry ? i.webkitGetAsEntry() : null; }).filter(Boolean);
    if (!entries.length) { send(Array.from(ev.dataTransfer.files).map(function (f) { return [f, f.name]; })); return; }
    Promise.all(entries.map(function (e) { return walk(e, '', out); })).then(function () { send(out); });
  });
  window.correlateSend = send;
})();
"""


def _csp(nonce: str | None) -> str:
    script = f"'nonce-{nonce}'" if nonce else "'none'"
    return (f"default-src 'none'; style-src 'unsafe-inline'; script-src {script}; connect-src 'self'; "
            "img-src data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")


def _page(title: str, body: str, console: Console, *, script: str = "", nonce: str | None = None) -> str:
    jobs = '<a href="/jobs">jobs</a>' if console.config.dataset is not None else ""
    script_tag = f'<script nonce="{nonce}">{script}</script>' if script and nonce else ""
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{_e(title)}</title>"
            f"<style>{_CSS}</style></head><body><nav class=\"top\"><b>correlate</b><a href=\"/\">analyse logs</a>"
            f"{jobs}<span class=\"sub\">serving {_e(console.root)}</span></nav>{body}{script_tag}</body></html>")


def _table(header: list[str], rows: list[list[str]], classes: list[str] | None = None) -> str:
    """Cells are HTML already (callers escape)."""
    head = "".join(f"<th>{h}</th>" for h in header)
    out = [f'<table class="t"><thead><tr>{head}</tr></thead><tbody>' if header else '<table class="t"><tbody>']
    for row in rows:
        cells = "".join(f'<td class="{c}">{v}</td>' if c else f"<td>{v}</td>"
                        for v, c in zip(row, classes or [""] * len(row)))
        out.append(f"<tr>{cells}</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def index_page(console: Console, error: str = "", nonce: str | None = None) -> str:
    cfg = console.config
    limit_mb = cfg.max_upload_bytes // (1 << 20)
    token = html.escape(console.token)
    err = f'<div class="error" id="error">{_e(error)}</div>' if error else ""
    add = ""
    if cfg.dataset is not None:
        add = ('<label><input type="checkbox" name="add" value="1"> also add the job to the dataset</label>'
               '<label>job id <input type="text" name="job_id" placeholder="from the logs (slurm-&lt;id&gt;)"></label>')
    upload = f"""
<h1>Analyse a job's logs</h1>{err}
<form id="upload" method="post" action="/analyze" enctype="multipart/form-data" data-limit="{cfg.max_upload_bytes}">
<input type="hidden" name="token" value="{token}">
<div class="drop" id="drop">Drop log files or a folder here<br><span class="sub">or pick them:</span>
<div class="row" style="justify-content:center">
<label>files <input type="file" id="files" name="files" multiple></label>
<label>a folder <input type="file" id="folder" name="files" webkitdirectory multiple></label></div>
<div class="row" style="justify-content:center">{add}<button type="submit" id="analyse">Analyse</button></div>
<div class="status" id="status"></div>
<div class="sub">Up to {limit_mb} MiB and {cfg.max_files} files; they are read in a temporary folder and
removed after the analysis. Compressed logs (.gz, .zst, .bz2, .xz) are read as they are; archives (.zip, .tar)
are not unpacked: drop the folder instead.</div></div>
</form>"""
    folder = f"""
<h2>Or read a folder on this machine</h2>
<form id="folder-form" method="post" action="/folder">
<input type="hidden" name="token" value="{token}">
<div class="row"><label>path below {_e(console.root)} <input type="text" name="path" id="path"
placeholder="a job's folder or file"></label>{add}<button type="submit" id="read">Analyse</button></div></form>
{_listing(console)}"""
    return _page("correlate", upload + folder, console, script=_SCRIPT, nonce=nonce)


def _listing(console: Console) -> str:
    """The served folder's entries (folders first), each a button that analyses it."""
    try:
        with os.scandir(console.root) as it:
            entries = sorted(it, key=lambda e: (not e.is_dir(), e.name))
    except OSError as e:
        return f'<div class="note">cannot list {_e(console.root)}: {_e(e.strerror or e)}</div>'
    token = html.escape(console.token)
    items = []
    for entry in entries:
        if entry.name.startswith("."):
            continue
        real = os.path.realpath(entry.path)
        if not _inside(real, str(console.root)):
            continue  # a link that leads out is not offered (nor would it be read)
        try:
            kind = "/" if entry.is_dir() else ""
            if not kind and not entry.is_file():
                continue
        except OSError:
            continue
        items.append(f'<li><form method="post" action="/folder"><input type="hidden" name="token" value="{token}">'
                     f'<input type="hidden" name="path" value="{_e(entry.name)}"><button class="link" type="submit">'
                     f'{_e(entry.name)}{kind}</button></form></li>')
        if len(items) >= LIST_LIMIT:
            items.append(f"<li>... (the first {LIST_LIMIT} shown; type a path above)</li>")
            break
    if not items:
        return '<p class="sub">The served folder is empty.</p>'
    return f'<p class="sub">In the served folder:</p><ul class="entries" id="entries">{"".join(items)}</ul>'


def _with_console_bar(page: str, key: str, source: str, note: str = "", failed: bool = False) -> str:
    """The report page with a line above it: back to the console, what was read, the downloads
    (and ``note``, what happened to the job in the dataset)."""
    colour = "#c62828" if failed else "#2e7d32"
    said = f' &middot; <span id="console-note" style="color:{colour}">{_e(note)}</span>' if note else ""
    bar = ('<nav style="font:13px system-ui,sans-serif;border-bottom:1px solid #dde3ea;padding:6px 0;margin-bottom:6px">'
           '<a href="/">&larr; analyse other logs</a> &middot; '
           f'<span style="color:#57606a">read: {_e(source)}</span> &middot; '
           f'<a href="/report/{key}/download">download this page</a> &middot; '
           f'<a href="/report/{key}/json">JSON</a>{said}</nav>')
    m = re.search(r"<body[^>]*>", page)
    return page[:m.end()] + bar + page[m.end():] if m else bar + page


# --- the jobs page -------------------------------------------------------------------------------


def _fmt_time(value: Any) -> str:
    if value is None:
        return ""
    try:
        return str(value.strftime("%Y-%m-%d %H:%M:%S UTC"))
    except AttributeError:
        return str(value)


def _num(value: Any, digits: int = 1) -> str:
    return "" if value is None else f"{float(value):,.{digits}f}"


def _job_link(job_id: str) -> str:
    return f'<a href="/job?id={quote(job_id, safe="")}">{_e(job_id)}</a>'


def jobs_page(console: Console) -> tuple[HTTPStatus, str]:
    from correlator import history
    from correlator.report.parquet import read_table

    dataset = console.config.dataset
    if dataset is None:
        body = ('<h1>Jobs</h1><div class="note">No dataset: start the console with '
                '<code>correlate serve DIR --parquet DATASET</code>, a folder written with '
                '<code>correlate --parquet DATASET LOGS...</code>.</div>')
        return HTTPStatus.NOT_FOUND, _page("correlate: jobs", body, console)
    if not (dataset / "incidents").is_dir():
        body = (f'<h1>Jobs</h1><div class="note">The dataset {_e(dataset)} holds no job yet: write one with '
                '<code>correlate --parquet DATASET LOGS...</code>, or analyse logs here with '
                '"also add the job to the dataset".</div>')
        return HTTPStatus.OK, _page("correlate: jobs", body, console)
    try:
        summary = history.summarize(dataset)
        diagnostics: list[Any] = []
        rows = [r for r in read_table(dataset, "incidents", diagnostics).to_pylist() if r["kind"] == "verdict"]
    except CorrelateError as e:
        return HTTPStatus.UNPROCESSABLE_ENTITY, _page("correlate: jobs", f'<h1>Jobs</h1><div class="error">{_e(e)}</div>', console)
    verdicts = ", ".join(f"{n} {_e(v)}" for v, n in summary.verdicts)
    out = [f'<h1>Jobs in {_e(dataset)}</h1>',
           f'<p id="summary">{summary.jobs} job(s): {verdicts}; {summary.rank_hours:,.1f} rank-hours spanned.</p>']
    for d in summary.diagnostics:
        out.append(f'<div class="note">{_e(d.path)}: {_e(d.message)}</div>')
    out.append('<h2 id="repeat">Nodes that were the root of more than one failure (candidates to drain)</h2>')
    if summary.repeated_roots:
        out.append(_table(["host", "failures", "rules", "ranks", "first", "last", "jobs"], [
            [_e(n.host), str(n.failures), _e(", ".join(n.rules)), _e(", ".join(map(str, n.ranks))), _e(n.first or ""),
             _e(n.last or ""), ", ".join(_job_link(j) for j in dict.fromkeys(n.job_ids))] for n in summary.repeated_roots]))
    else:
        out.append("<p>none</p>")
    out.append('<h2 id="by-category">Failures by category</h2>')
    out.append(_table(["category", "jobs", "rank-hours"], [
        [_e(c.category), str(c.jobs), _num(c.rank_hours)] for c in summary.categories], ["", "num", "num"])
        if summary.categories else "<p>none</p>")
    out.append('<h2 id="by-rule">Failures by rule</h2>')
    out.append(_table(["rule", "title", "jobs", "rank-hours", "job ids"], [
        [f"<code>{_e(r.rule)}</code>", _e(r.title), str(r.jobs), _num(r.rank_hours),
         ", ".join(_job_link(j) for j in r.job_ids[:20]) + (" ..." if len(r.job_ids) > 20 else "")]
        for r in summary.rules], ["", "", "num", "num", ""]) if summary.rules else "<p>none</p>")
    by_job = {str(r["job_id"]): r for r in rows}
    # the latest failures first: what a person opening the page after a bad night looks for
    latest = sorted(by_job.items(), key=lambda kv: (kv[1]["job_start"] is not None, kv[1]["job_start"] or 0, kv[0]),
                    reverse=True)
    shown = latest[:JOBS_LIMIT]
    out.append(f'<h2 id="all-jobs">Every job{f" (the latest {len(shown)} of {len(latest)})" if len(shown) < len(latest) else ""}</h2>')
    out.append(_table(["job", "verdict", "rule", "rank", "host", "first failure", "ranks", "rank-hours"], [
        [_job_link(j), _e(r["verdict"] or ""), f"<code>{_e(r['rule'] or '')}</code>",
         "" if r["rank"] is None else str(r["rank"]), _e(r["host"] or ""), _fmt_time(r["first_time"]),
         "" if r["n_ranks"] is None else str(r["n_ranks"]), _num(r["rank_hours"])]
        for j, r in shown], ["", "", "", "num", "", "", "num", "num"]))
    return HTTPStatus.OK, _page("correlate: jobs", "".join(out), console)


def job_page(console: Console, job_id: str) -> tuple[HTTPStatus, str]:
    """One job of the dataset, from its three tables (the dataset holds no full report)."""
    from correlator.report.parquet import read_tables

    dataset = console.config.dataset
    if dataset is None:
        return jobs_page(console)
    diagnostics: list[Any] = []
    try:
        tables = read_tables(dataset, ("incidents", "events", "ranks"), diagnostics)
    except CorrelateError as e:
        return HTTPStatus.UNPROCESSABLE_ENTITY, _page("correlate: job", f'<div class="error">{_e(e)}</div>', console)
    import pyarrow.compute as pc

    def of_job(name: str) -> list[dict[str, Any]]:
        t = tables[name]
        return t.filter(pc.equal(t["job_id"], job_id)).to_pylist() if t.num_rows else []

    incidents = of_job("incidents")
    verdict = next((r for r in incidents if r["kind"] == "verdict"), None)
    if verdict is None:
        body = (f'<h1>No job {_e(job_id)}</h1><div class="error">the dataset {_e(dataset)} has no job of that id</div>'
                '<p><a href="/jobs">all jobs</a></p>')
        return HTTPStatus.NOT_FOUND, _page("correlate: no such job", body, console)
    events, ranks = of_job("events"), of_job("ranks")
    v = verdict["verdict"] or "undetermined"
    if v == "root_cause" and verdict["rank"] is not None:
        line = f"rank {verdict['rank']} on {verdict['host'] or '?'} failed first: {verdict['title'] or verdict['rule']}"
    elif v == "root_cause":
        line = f"{verdict['host'] or 'a node'} failed first: {verdict['title'] or verdict['rule']}"
    elif v == "job_level":
        line = f"the job ended for a job-level reason: {verdict['title'] or verdict['rule'] or ''}"
    elif v == "no_failure":
        line = "no failure found in the logs"
    else:
        line = "no root cause could be named"
    facts = [("verdict", v), ("rule", verdict["rule"]), ("rank", verdict["rank"]), ("host", verdict["host"]),
             ("local rank", verdict["local_rank"]), ("first failure", _fmt_time(verdict["first_time"])),
             ("confidence", _num(verdict["confidence"], 2)), ("decided by", verdict["decided_by"]),
             ("tied with ranks", verdict["tie"]), ("evidence", verdict["evidence"]), ("ranks", verdict["n_ranks"]),
             ("hosts", verdict["n_hosts"]), ("job start", _fmt_time(verdict["job_start"])),
             ("job end", _fmt_time(verdict["job_end"])), ("span (s)", _num(verdict["span_s"])),
             ("rank-hours", _num(verdict["rank_hours"], 2))]
    out = [f'<h1>Job {_e(job_id)}</h1>', f'<div class="banner v-{_e(v)}" id="verdict">{_e(line)}</div>',
           '<p class="sub">From the dataset\'s tables (it keeps the verdict, the groups, the timeline and the ranks, '
           'not the whole report); the logs themselves give the full report.</p>',
           _table([], [[_e(k), _e(val)] for k, val in facts if val not in (None, "")])]
    for d in diagnostics:
        out.append(f'<div class="note">{_e(d.path)}: {_e(d.message)}</div>')
    again = _logs_folder(console, events)
    if again is not None:
        token = html.escape(console.token)
        out.append(f'<form method="post" action="/folder"><input type="hidden" name="token" value="{token}">'
                   f'<input type="hidden" name="path" value="{_e(again)}">Its logs are still in {_e(again)}: '
                   '<button type="submit" id="full-report">make the full report</button></form>')
    groups = [r for r in incidents if r["kind"] == "group"]
    if groups:
        out.append('<h2>What else happened</h2>')
        out.append(_table(["label", "rule", "title", "ranks", "count", "first", "last"], [
            [_e(g["label"] or ""), f"<code>{_e(g['rule'] or '')}</code>", _e(g["title"] or ""), _e(g["ranks"] or ""),
             str(g["count"] or ""), _fmt_time(g["first_time"]), _fmt_time(g["last_time"])] for g in groups]))
    events.sort(key=lambda r: r["seq"] if r["seq"] is not None else 0)
    out.append(f'<h2>Timeline ({len(events)} event(s))</h2>')
    shown = events[:JOB_EVENTS_LIMIT]
    out.append(_table(["time", "+s", "host", "rank", "label", "rule", "line", "where"], [
        [_fmt_time(r["time"]), _num(r["after_root_s"]), _e(r["host"] or ""), "" if r["rank"] is None else str(r["rank"]),
         ("<b>root</b>" if r["is_root"] else _e(r["label"] or "")), f"<code>{_e(r['rule'] or '')}</code>",
         _e(r["text"] or ""), _e(f"{r['path'] or ''}:{r['line'] or ''}")] for r in shown],
        ["", "num", "", "num", "", "", "txt", "txt"]))
    if len(events) > len(shown):
        out.append(f'<p class="sub">{len(events) - len(shown)} more event(s) not shown.</p>')
    if ranks:
        ranks.sort(key=lambda r: r["rank"] if r["rank"] is not None else -1)
        out.append(f'<details><summary>Ranks ({len(ranks)})</summary>')
        out.append(_table(["rank", "host", "local rank", "state", "first", "last", "lines", "last step"], [
            [str(r["rank"]), _e(r["host"] or ""), "" if r["local_rank"] is None else str(r["local_rank"]),
             _e(r["state"] or ""), _fmt_time(r["first_time"]), _fmt_time(r["last_time"]),
             "" if r["lines"] is None else str(r["lines"]), "" if r["last_step"] is None else str(r["last_step"])]
            for r in ranks]))
        out.append("</details>")
    out.append('<p><a href="/jobs">all jobs</a></p>')
    return HTTPStatus.OK, _page(f"correlate: job {job_id}", "".join(out), console)


def _logs_folder(console: Console, events: list[dict[str, Any]]) -> str | None:
    """The folder below the served root that holds every log the job's events name, if it still does."""
    paths = {r["path"] for r in events if r["path"]}
    if not paths or any(not os.path.isabs(p) for p in paths):
        return None
    try:
        common = os.path.commonpath(list(paths))
    except ValueError:
        return None
    if common in paths:
        common = os.path.dirname(common)
    real = os.path.realpath(common)
    if not _inside(real, str(console.root)) or not os.path.isdir(real):
        return None
    if not all(os.path.isfile(p) and _inside(os.path.realpath(p), str(console.root)) for p in paths):
        return None
    return os.path.relpath(real, console.root)


# --- HTTP ----------------------------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    """One request. Routes: ``GET /``, ``/jobs``, ``/job?id=``, ``/report/<key>`` (and ``/download``,
    ``/json``); ``POST /analyze`` (an upload), ``/folder`` (a path below the served folder)."""

    server_version = "correlate-serve"
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT_S
    console: Console  # set on the subclass ``make_server`` builds

    # -- plumbing --

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        sys.stderr.write(visible(f"{self.address_string()} {format % args}") + "\n")

    def _send(self, status: HTTPStatus, body: str | bytes, content_type: str = "text/html; charset=utf-8", *,
              nonce: str | None = None, csp: str | None = None, extra: dict[str, str] | None = None) -> None:
        data = body.encode("utf-8") if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Content-Security-Policy", csp or _csp(nonce))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _redirect(self, location: str) -> None:
        self.send_response(HTTPStatus.SEE_OTHER)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()

    def _host_ok(self) -> bool:
        allowed = self.console.allowed_hosts
        if not allowed:
            return True
        if (self.headers.get("Host") or "").lower() in allowed:
            return True
        self.close_connection = True
        self._send(HTTPStatus.MISDIRECTED_REQUEST, "this console answers only at its own address\n", "text/plain; charset=utf-8")
        return False

    def _wants_json(self) -> bool:
        return self.headers.get("X-Console") == "1"

    def _error(self, status: HTTPStatus, message: str) -> None:
        if self._wants_json():
            self._send(status, json.dumps({"error": visible(redact(message))}), "application/json")
            return
        nonce = secrets.token_urlsafe(16)
        self._send(status, index_page(self.console, message, nonce), nonce=nonce)

    # -- GET --

    def do_HEAD(self) -> None:  # noqa: N802 - the base class's name
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        if not self._host_ok():
            return
        url = urlsplit(self.path)
        path = url.path
        try:
            if path == "/":
                nonce = secrets.token_urlsafe(16)
                self._send(HTTPStatus.OK, index_page(self.console, nonce=nonce), nonce=nonce)
            elif path == "/jobs":
                status, page = jobs_page(self.console)
                self._send(status, page)
            elif path == "/job":
                job_id = parse_qs(url.query).get("id", [""])[0]
                status, page = job_page(self.console, job_id)
                self._send(status, page)
            elif path.startswith("/report/"):
                self._report(path.removeprefix("/report/"))
            elif path == "/favicon.ico":
                self._send(HTTPStatus.NOT_FOUND, b"", "image/x-icon")
            else:
                self._send(HTTPStatus.NOT_FOUND, _page("not found", '<h1>Not found</h1><p><a href="/">the console</a></p>',
                                                       self.console))
        except Exception as e:  # noqa: BLE001 - a bug: the page says so, the server goes on
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, _page("internal error", f'<div class="error">internal error '
                       f'({_e(type(e).__name__)}: {_e(e)}); please report it</div>', self.console))

    def _report(self, rest: str) -> None:
        key, _, what = rest.partition("/")
        kept = self.console.kept(key) if _TOKEN_ID.match(key) else None
        if kept is None:
            self._send(HTTPStatus.NOT_FOUND, _page("no such report", '<h1>No such report</h1><p>The console keeps the '
                       f'last {KEEP_REPORTS} reports while it runs. <a href="/">Analyse the logs again</a>.</p>',
                       self.console))
            return
        if what == "json":
            from correlator.report import render

            self._send(HTTPStatus.OK, render(kept.report, "json"), "application/json; charset=utf-8")
            return
        page = self.console.page_of(key) or ""
        # the report page keeps its own policy: no script at all
        report_csp = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
        if what == "download":
            self._send(HTTPStatus.OK, page, csp=report_csp,
                       extra={"Content-Disposition": f'attachment; filename="correlate-report-{key[:8]}.html"'})
        elif what == "":
            self._send(HTTPStatus.OK, page, csp=report_csp)
        else:
            self._send(HTTPStatus.NOT_FOUND, _page("not found", "<h1>Not found</h1>", self.console))

    # -- POST --

    def do_POST(self) -> None:  # noqa: N802 - the base class's name
        self.close_connection = True  # a refused body is not read: the connection cannot be reused
        if not self._host_ok():
            return
        path = urlsplit(self.path).path
        if path not in ("/analyze", "/folder"):
            self._send(HTTPStatus.NOT_FOUND, _page("not found", "<h1>Not found</h1>", self.console))
            return
        site = self.headers.get("Sec-Fetch-Site")
        if site not in (None, "same-origin", "none"):
            self._error(HTTPStatus.FORBIDDEN, "a form from another site was refused")
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
            if length < 0:
                raise ValueError
        except ValueError:
            self._error(HTTPStatus.LENGTH_REQUIRED, "the request has no valid Content-Length")
            return
        body = _Body(self.rfile, length)
        try:
            if path == "/analyze":
                self._upload(body, length)
            else:
                self._folder(body, length)
        except UploadError as e:
            self._drain(body)
            self._error(e.status, f"upload refused: {e}")
        except CorrelateError as e:
            self._error(HTTPStatus.UNPROCESSABLE_ENTITY, f"error: {e}")
        except Exception as e:  # noqa: BLE001 - a bug: the page says so, the server goes on
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"internal error ({type(e).__name__}: {e}); please report it")

    def _drain(self, body: _Body) -> None:
        """Read what is left of a refused body: a browser still sending shows no answer otherwise."""
        if body.left > DRAIN_LIMIT:
            return
        try:
            while body.read(_CHUNK):
                pass
        except (UploadError, OSError):
            pass

    def _check_token(self, fields: dict[str, list[str]]) -> None:
        given = (fields.get("token") or [""])[0]
        if not secrets.compare_digest(given.encode(), self.console.token.encode()):
            raise UploadError("the form's token is missing or stale: reload the console's page and try again",
                              HTTPStatus.FORBIDDEN)

    def _done(self, key: str) -> None:
        location = f"/report/{key}"
        if self._wants_json():
            self._send(HTTPStatus.OK, json.dumps({"report": location}), "application/json")
        else:
            self._redirect(location)

    def _upload(self, body: _Body, length: int) -> None:
        console = self.console
        limit = console.config.max_upload_bytes
        if length > limit + UPLOAD_OVERHEAD:
            raise UploadError(f"the upload is {length / (1 << 20):,.0f} MiB: over the console's limit of "
                              f"{limit // (1 << 20)} MiB (start it with a larger --max-upload, or point at the folder)",
                              HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
        dest = Path(tempfile.mkdtemp(prefix="upload-", dir=console.scratch))
        try:
            form = parse_multipart(body, self.headers.get("Content-Type", ""), length, dest,
                                   max_bytes=limit, max_files=console.config.max_files)
            self._check_token(form.fields)
            if not form.files:
                raise UploadError("no file was uploaded: pick or drop the job's log files")
            names = [str(f) for f in form.files]
            source = f"{len(names)} uploaded file(s): " + ", ".join(names[:6]) + (" ..." if len(names) > 6 else "")
            key = console.analyze([str(dest)], source, form.first("job_id").strip(), form.first("add") == "1",
                                  strip=str(dest))
        finally:
            shutil.rmtree(dest, ignore_errors=True)
        self._done(key)

    def _folder(self, body: _Body, length: int) -> None:
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if ctype == "multipart/form-data":
            dest = Path(tempfile.mkdtemp(prefix="form-", dir=self.console.scratch))
            try:
                fields = parse_multipart(body, self.headers["Content-Type"], length, dest, max_bytes=0,
                                         max_files=0).fields
            finally:
                shutil.rmtree(dest, ignore_errors=True)
        elif ctype == "application/x-www-form-urlencoded":
            fields = parse_urlencoded(body, length)
        else:
            raise UploadError("send the form as the page does (urlencoded)", HTTPStatus.UNSUPPORTED_MEDIA_TYPE)
        self._check_token(fields)
        text = (fields.get("path") or [""])[0]
        target = resolve_under(self.console.root, text)
        key = self.console.analyze([str(target)], str(target), (fields.get("job_id") or [""])[0].strip(),
                                   (fields.get("add") or [""])[0] == "1")
        self._done(key)


def make_server(config: ServeConfig, host: str = "127.0.0.1", port: int = 0) -> tuple[ThreadingHTTPServer, Console]:
    """A bound server (not yet serving) and its console; ``port`` 0 takes a free port."""
    console = Console(config)
    handler = type("ConsoleHandler", (Handler,), {"console": console})
    server_cls: type[ThreadingHTTPServer] = ThreadingHTTPServer
    if ":" in host:
        import socket

        server_cls = type("ThreadingHTTPServer6", (ThreadingHTTPServer,), {"address_family": socket.AF_INET6})
    try:
        server = server_cls((host, port), handler)
    except OSError:
        console.close()
        raise
    server.daemon_threads = True
    bound = server.server_address[1]
    if host in _LOOPBACK or host.startswith("127."):
        console.allowed_hosts = {f"{h}:{bound}" for h in ("127.0.0.1", "localhost", "[::1]")} | {
            f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}"}
    return server, console


def url_of(server: ThreadingHTTPServer, host: str) -> str:
    port = server.server_address[1]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def serve(config: ServeConfig, host: str = "127.0.0.1", port: int = 0, out: IO[str] | None = None,
          err: IO[str] | None = None) -> None:
    """Serve until Ctrl-C or SIGTERM; prints the URL (alone on a line, first) to ``out``. Either
    stop removes the temporary folder of the uploads."""
    out = out or sys.stdout
    err = err or sys.stderr
    if not config.root.is_dir():
        raise InputError("the console serves a folder: this is not one", str(config.root),
                         "correlate serve DIR (default: the current folder)")
    try:
        server, console = make_server(config, host, port)
    except OSError as e:
        raise UsageError(f"cannot listen on {host}:{port}: {e.strerror or e}", hint="pick another --port (0: any free one)") from None
    out.write(url_of(server, host) + "\n")
    out.flush()
    notes = [f"correlate serve: reading logs below {console.root}"]
    if config.dataset is not None:
        notes.append(f"jobs page over the dataset {config.dataset}")
    if not console.allowed_hosts:
        notes.append(f"warning: listening on {host}, not on loopback: whoever reaches this address can read the "
                     f"logs below {console.root}")
    notes.append("Ctrl-C stops it")
    err.write(visible("; ".join(notes)) + "\n")
    err.flush()
    previous = None
    if threading.current_thread() is threading.main_thread():  # a service manager's stop is Ctrl-C too
        previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        console.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


__all__ = ["Console", "Form", "ServeConfig", "UploadError", "boundary_of", "index_page", "job_page", "jobs_page",
           "make_server", "parse_multipart", "resolve_under", "serve", "upload_name", "url_of"]
