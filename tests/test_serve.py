"""``correlate serve``: the local web console.

The multipart parser, upload names and the served-folder rule are tested as functions; the server
is tested as a user meets it: started with ``correlate serve DIR --port 0`` in its own process,
spoken to over HTTP (uploads, the folder form, traversal, tokens, hosts, limits, the jobs page over
a dataset written by ``correlate --parquet``), and driven in real headless Chromium (a sample job
picked in the page's file input, the verdict read in the page that comes back).
"""

from __future__ import annotations

import http.client
import io
import json
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from urllib.parse import quote, urlencode, urlsplit

import pytest
from cdp import Browser

from correlator.pipeline import analyze
from correlator.report.markdown import headline
from correlator.serve import (
    MAX_FIELD,
    UploadError,
    boundary_of,
    parse_multipart,
    resolve_under,
    upload_name,
)

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_logs"


# --- helpers -------------------------------------------------------------------------------------


def multipart(fields: dict[str, str], files: list[tuple[str, bytes]], boundary: str | None = None) -> tuple[bytes, str]:
    """A multipart/form-data body as a browser sends it: fields, then each file as ``files``."""
    boundary = boundary or "----correlateTest" + secrets.token_hex(8)
    out = io.BytesIO()
    for name, value in fields.items():
        out.write(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    for filename, data in files:
        quoted = filename.replace('"', "%22").replace("\r", "%0D").replace("\n", "%0A")
        out.write(f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{quoted}"\r\n'
                  f"Content-Type: application/octet-stream\r\n\r\n".encode())
        out.write(data + b"\r\n")
    out.write(f"--{boundary}--\r\n".encode())
    return out.getvalue(), f"multipart/form-data; boundary={boundary}"


class Trickle(io.RawIOBase):
    """A stream that hands out at most ``step`` bytes a read (a boundary split across reads)."""

    def __init__(self, data: bytes, step: int) -> None:
        self.data, self.pos, self.step = data, 0, step

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        n = self.step if n < 0 else min(n, self.step)
        chunk = self.data[self.pos:self.pos + n]
        self.pos += len(chunk)
        return chunk


def files_under(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --- upload names --------------------------------------------------------------------------------


@pytest.mark.parametrize("raw, want", [
    ("rank-0.out", "rank-0.out"),
    ("slurm-88123_5.out", "slurm-88123_5.out"),
    ("job/node-0/640052_x/attempt_0/3/stdout.log", "job/node-0/640052_x/attempt_0/3/stdout.log"),
    ("../../etc/passwd", "etc/passwd"),
    ("/etc/passwd", "etc/passwd"),
    ("..\\..\\windows\\win.ini", "windows/win.ini"),
    ("C:\\logs\\rank-1.out", "C_/logs/rank-1.out"),
    (".hidden/.bashrc", "hidden/bashrc"),
    ("a/./b/../c.log", "a/b/c.log"),
    ("name with spaces & <tags>.log", "name_with_spaces____tags_.log"),
    ("nul\x00byte\nline.log", "nul_byte_line.log"),
    ("", "upload-7"),
    ("../..", "upload-7"),
    ("...", "upload-7"),
])
def test_upload_names_never_leave_the_upload_folder(raw, want):
    got = upload_name(raw, 7)
    assert got == PurePosixPath(want)
    assert not got.is_absolute() and ".." not in got.parts and all(not p.startswith(".") for p in got.parts)


def test_upload_names_keep_the_last_levels_of_a_deep_path():
    deep = "/".join(f"d{i}" for i in range(40)) + "/attempt_0/3/stdout.log"
    got = upload_name(deep, 0)
    assert got.parts[-3:] == ("attempt_0", "3", "stdout.log") and len(got.parts) == 12
    assert len(upload_name("x" * 5000, 0).name) == 120


# --- the multipart parser ------------------------------------------------------------------------


@pytest.mark.parametrize("step", [1, 7, 64, 1 << 20])
def test_multipart_writes_each_file_under_its_safe_name(tmp_path, step):
    payload = [("rank-0.out", b"line one\r\n--not-the-boundary\r\n" * 50), ("../../evil.log", b"x" * 70_000),
               ("job/attempt_0/1/stderr.log", b""), ("rank-0.out", b"second file of the same name")]
    body, ctype = multipart({"token": "abc", "job_id": "j-1"}, payload)
    dest = tmp_path / "dest"
    dest.mkdir()
    form = parse_multipart(Trickle(body, step), ctype, len(body), dest, max_bytes=1 << 20)
    assert form.fields == {"token": ["abc"], "job_id": ["j-1"]}
    assert [str(f) for f in form.files] == ["rank-0.out", "evil.log", "job/attempt_0/1/stderr.log", "rank-0.out~2"]
    assert files_under(dest) == {"rank-0.out": payload[0][1], "evil.log": payload[1][1],
                                 "job/attempt_0/1/stderr.log": b"", "rank-0.out~2": payload[3][1]}
    assert form.file_bytes == sum(len(d) for _, d in payload)
    assert not (tmp_path / "evil.log").exists()


def test_multipart_file_and_folder_of_one_name(tmp_path):
    body, ctype = multipart({}, [("a", b"file a"), ("a/b.log", b"inside a")])
    form = parse_multipart(io.BytesIO(body), ctype, len(body), tmp_path, max_bytes=1 << 20)
    assert files_under(tmp_path) == {"a": b"file a", "a_b.log": b"inside a"}
    assert [str(f) for f in form.files] == ["a", "a_b.log"]


def test_multipart_empty_file_input_is_no_file(tmp_path):
    """A form sent with its file input left empty has one part with ``filename=""`` and no bytes."""
    body, ctype = multipart({"token": "t"}, [("", b"")])
    form = parse_multipart(io.BytesIO(body), ctype, len(body), tmp_path, max_bytes=1 << 20)
    assert form.files == [] and files_under(tmp_path) == {}


def test_multipart_preamble_padding_and_quoted_names(tmp_path):
    boundary = "b0undary'()+_,-./:=?"
    body = (b"preamble to ignore\r\n--" + boundary.encode() + b"  \t\r\n"
            b'Content-Disposition: form-data; name="files"; filename="q\\"uote.log"\r\n\r\n'
            b"data\r\n--" + boundary.encode() + b"--\r\nepilogue")
    form = parse_multipart(io.BytesIO(body), f'multipart/form-data; boundary="{boundary}"', len(body), tmp_path,
                           max_bytes=100)
    assert files_under(tmp_path) == {"q_uote.log": b"data"} and len(form.files) == 1


@pytest.mark.parametrize("case", ["over-bytes", "over-files", "big-field", "cut-off", "no-close", "no-name",
                                  "long-headers", "text-after-boundary"])
def test_multipart_refuses_what_is_malformed_or_over_a_limit(tmp_path, case):
    files = [("a.log", b"a" * 100), ("b.log", b"b" * 100)]
    fields = {"token": "t"}
    max_bytes, max_files = 1000, 10
    if case == "over-bytes":
        max_bytes = 150
    elif case == "over-files":
        max_files = 1
    elif case == "big-field":
        fields = {"path": "p" * (MAX_FIELD + 1)}
    body, ctype = multipart(fields, files)
    length = len(body)
    if case == "cut-off":
        body = body[:len(body) // 2]  # the client stopped sending before the length it said
    elif case == "no-close":
        body = body[:body.rindex(b"\r\n--")]
        length = len(body)
    elif case == "no-name":
        body = body.replace(b'name="token"', b'nom="token"')
        length = len(body)
    elif case == "long-headers":
        body = body.replace(b"Content-Type: application/octet-stream", b"X-Pad: " + b"p" * 20_000, 1)
        length = len(body)
    elif case == "text-after-boundary":
        body = body.replace(b"\r\nContent-Disposition", b"junk\r\nContent-Disposition", 1)
        length = len(body)
    with pytest.raises(UploadError) as err:
        parse_multipart(io.BytesIO(body), ctype, length, tmp_path, max_bytes=max_bytes, max_files=max_files)
    expected = {"over-bytes": "over the upload limit", "over-files": "more than 1 files", "big-field": "over 64 KiB",
                "cut-off": "cut off", "no-close": "no closing boundary", "no-name": "no form-data name",
                "long-headers": "headers are too long", "text-after-boundary": "followed by text"}[case]
    assert expected in str(err.value)
    if case in ("over-bytes", "over-files"):
        assert err.value.status == 413


@pytest.mark.parametrize("ctype", ["text/plain", "multipart/form-data", "multipart/form-data; boundary=",
                                   "multipart/form-data; boundary=" + "x" * 71, "application/json; boundary=abc"])
def test_multipart_needs_a_valid_boundary(ctype):
    with pytest.raises(UploadError):
        boundary_of(ctype)


# --- the served folder -----------------------------------------------------------------------------


@pytest.fixture()
def served(tmp_path: Path) -> Path:
    """A served folder holding a job, a link inside, links and a FIFO leading out, next to a secret."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.log").write_text("RuntimeError: CUDA error: an illegal memory access was encountered\n")
    root = tmp_path / "root"
    shutil.copytree(SAMPLES / "cuda-oom-per-rank", root / "job")
    (root / "job" / "stolen.out").symlink_to(outside / "secret.log")
    (root / "job-link").symlink_to(root / "job")
    (root / "escape").symlink_to(outside)
    (root / "escape.log").symlink_to(outside / "secret.log")
    os.mkfifo(root / "pipe.out")
    return root


def test_resolve_under_takes_what_is_below_the_root(served):
    assert resolve_under(served, "job") == (served / "job").resolve()
    assert resolve_under(served, str(served / "job" / "rank-5.out")) == served / "job" / "rank-5.out"
    assert resolve_under(served, "job-link") == served / "job"  # a link that stays inside: its target
    assert resolve_under(served, ".") == served


@pytest.mark.parametrize("text, message", [
    ("..", "is not below the served folder"),
    ("job/../../outside", "is not below the served folder"),
    ("/etc", "is not below the served folder"),
    ("escape", "is not below the served folder"),
    ("escape.log", "is not below the served folder"),
    ("~", "is not below the served folder"),
    ("pipe.out", "neither a folder nor a regular file"),
    ("nothing-here", "No such file or directory"),
    ("", "name a folder or file"),
    ("job\x00", "NUL"),
])
def test_resolve_under_refuses_what_leaves_the_root(served, text, message):
    with pytest.raises(Exception) as err:
        resolve_under(served, text)
    assert message in str(err.value)


# --- the server over HTTP ------------------------------------------------------------------------


class Server:
    """``correlate serve`` in its own process, stopped with Ctrl-C (SIGINT) as a person would."""

    def __init__(self, root: Path, *args: str, tmpdir: Path | None = None) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        if tmpdir is not None:
            env["TMPDIR"] = str(tmpdir)
        self.proc = subprocess.Popen([sys.executable, "-m", "correlator", "serve", str(root), "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        line = self.proc.stdout.readline().decode().strip() if ready else ""
        if not line.startswith("http://127.0.0.1:"):
            self.proc.kill()
            raise AssertionError(f"no URL from correlate serve: {line!r} {self.proc.communicate()[1][-2000:]!r}")
        self.url = line
        parts = urlsplit(line)
        self.host, self.port = parts.hostname or "", parts.port or 0
        self.token = re.search(r'name="token" value="([^"]+)"', self.get("/")[2]).group(1)  # type: ignore[union-attr]

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
                ) -> tuple[int, dict[str, str], str]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode("utf-8", "replace")
        finally:
            conn.close()

    def get(self, path: str, **kw: object) -> tuple[int, dict[str, str], str]:
        return self.request("GET", path, **kw)  # type: ignore[arg-type]

    def upload(self, files: list[tuple[str, bytes]], fields: dict[str, str] | None = None, *,
               token: str | None = None, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
        body, ctype = multipart({"token": self.token if token is None else token, **(fields or {})}, files)
        return self.request("POST", "/analyze", body, {"Content-Type": ctype, **(headers or {})})

    def folder(self, path: str, token: str | None = None, **fields: str) -> tuple[int, dict[str, str], str]:
        body = urlencode({"token": self.token if token is None else token, "path": path, **fields}).encode()
        return self.request("POST", "/folder", body, {"Content-Type": "application/x-www-form-urlencoded"})

    def followed(self, answer: tuple[int, dict[str, str], str]) -> str:
        status, headers, text = answer
        assert status == 303, (status, re.findall(r'class="error"[^>]*>([^<]*)', text))
        assert re.fullmatch(r"/report/[A-Za-z0-9_-]+", headers["location"])
        status, _, page = self.get(headers["location"])
        assert status == 200
        return page

    def stop(self, sig: int = signal.SIGINT) -> str:
        self.proc.send_signal(sig)
        try:
            _, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return err.decode("utf-8", "replace")


def banner(page: str) -> str:
    m = re.search(r'<div class="banner[^"]*"[^>]*>(.*?)</div>', page, re.S)
    assert m, page[:500]
    return re.sub(r"<[^>]+>", "", m.group(1)).strip()


def expected(job: str) -> dict:
    return tomllib.loads((SAMPLES / job / "expected.toml").read_text())


def unescape(text: str) -> str:
    import html

    return html.unescape(text)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("served")
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.log").write_text("[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\n")
    served = base / "root"
    served.mkdir()
    for job in ("cuda-oom-per-rank", "healthy"):
        shutil.copytree(SAMPLES / job, served / job)
    (served / "cuda-oom-per-rank" / "stolen.out").symlink_to(outside / "secret.log")
    (served / "escape").symlink_to(outside)
    os.mkfifo(served / "pipe.out")
    return served


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[Server]:
    s = Server(root)
    yield s
    s.stop()


def test_upload_of_a_sample_job_gives_its_report(server):
    job = SAMPLES / "cuda-oom-per-rank"
    files = [(p.name, p.read_bytes()) for p in sorted(job.iterdir()) if p.suffix == ".out"]
    page = server.followed(server.upload(files))
    want = expected("cuda-oom-per-rank")
    text = unescape(banner(page))
    assert text == headline(analyze([str(job)]))
    assert f"rank {want['root_rank']}" in text and want["root_host"] in text
    assert "analyse other logs" in page and f"{len(files)} uploaded file(s)" in page
    assert "correlate-serve-" not in page, "the temporary folder's name shows in the report"
    assert re.search(r"rank-5\.out:\d+", page)


def test_upload_keeps_folders_so_a_torchelastic_log_dir_reads_as_one(server):
    job = SAMPLES / "torchelastic-logdir"
    files = [(p.relative_to(SAMPLES).as_posix(), p.read_bytes()) for p in sorted(job.rglob("*.log"))]
    page = server.followed(server.upload(files))
    assert unescape(banner(page)) == headline(analyze([str(job)]))


def test_upload_json_answer_and_report_downloads(server):
    job = SAMPLES / "healthy"
    status, headers, text = server.upload([(p.name, p.read_bytes()) for p in job.glob("*.out")],
                                          headers={"X-Console": "1"})
    assert status == 200 and headers["content-type"] == "application/json"
    location = json.loads(text)["report"]
    status, headers, page = server.get(location + "/download")
    assert status == 200 and "attachment" in headers["content-disposition"] and "no failure" in page
    status, _, doc = server.get(location + "/json")
    assert status == 200 and json.loads(doc)["verdict"] == expected("healthy")["verdict"]
    status, headers, _ = server.get(location)
    assert "script-src" not in headers["content-security-policy"]  # the report page runs no script at all


def test_uploaded_log_text_is_escaped_and_secrets_masked(server):
    log = (b"[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered <script>alert(1)</script>"
           b" HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789\n")
    page = server.followed(server.upload([("<img src=x onerror=alert(1)>.log", log)]))
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page
    assert "hf_abcdefghijklmnopqrstuvwxyz0123456789" not in page
    assert "<img" not in page


def test_the_folder_form_reads_a_folder_below_the_root(server, root):
    page = server.followed(server.folder("cuda-oom-per-rank"))
    assert unescape(banner(page)) == headline(analyze([str(root / "cuda-oom-per-rank")]))
    # the link inside the job's folder that leads out was not followed: its file's error is not read
    assert "illegal memory access" not in page
    assert "stolen.out" in page and "not followed" in page
    page = server.followed(server.folder(str(root / "healthy" / "slurm-600001.out")))
    assert "no failure" in unescape(banner(page))


@pytest.mark.parametrize("path, message", [
    ("..", "is not below the served folder"),
    ("../outside", "is not below the served folder"),
    ("cuda-oom-per-rank/../../outside/secret.log", "is not below the served folder"),
    ("/etc", "is not below the served folder"),
    ("escape", "is not below the served folder"),
    ("pipe.out", "neither a folder nor a regular file"),
    ("no-such-job", "No such file or directory"),
    ("*", "No such file or directory"),
])
def test_the_folder_form_refuses_paths_outside_the_root(server, path, message):
    status, _, page = server.folder(path)
    assert status == 422
    err = unescape(re.search(r'<div class="error" id="error">(.*?)</div>', page, re.S).group(1))  # type: ignore[union-attr]
    assert message in err and "illegal memory access" not in page
    assert 'id="upload"' in page  # the console's page, to try again


def test_a_dataset_that_cannot_take_the_job_keeps_the_report(tmp_path):
    s = Server(SAMPLES, "--parquet", str(tmp_path / "ds"))
    try:
        page = s.followed(s.folder("healthy", add="1", job_id="j" * 300))  # too long to name a partition
        assert "no failure" in unescape(banner(page))
        colour, note = re.search(r'id="console-note" style="color:([^"]*)">([^<]*)<', page).groups()  # type: ignore[union-attr]
        assert unescape(note).startswith("not added to the dataset: ")
        assert colour == "#c62828"  # said as a failure (by what happened, not by the note's wording)
        page = s.followed(s.folder("healthy", add="1", job_id="j1"))
        colour, note = re.search(r'id="console-note" style="color:([^"]*)">([^<]*)<', page).groups()  # type: ignore[union-attr]
        assert unescape(note).startswith("added to the dataset") and colour == "#2e7d32"
    finally:
        s.stop()


def test_forms_without_the_token_or_from_another_site_are_refused(server):
    status, _, page = server.folder("healthy", token="guessed")
    assert status == 403 and "token" in page
    status, _, page = server.upload([("a.log", b"x\n")], token="")
    assert status == 403
    body = urlencode({"token": server.token, "path": "healthy"}).encode()
    status, _, page = server.request("POST", "/folder", body, {"Content-Type": "application/x-www-form-urlencoded",
                                                               "Sec-Fetch-Site": "cross-site"})
    assert status == 403 and "another site" in page


def test_requests_for_another_host_name_are_refused(server):
    """A page of another site whose name was made to point at 127.0.0.1 (DNS rebinding) gets nothing."""
    status, _, text = server.get("/", headers={"Host": f"attacker.example:{server.port}"})
    assert status == 421 and "token" not in text
    status, _, _ = server.get("/", headers={"Host": f"localhost:{server.port}"})
    assert status == 200


def test_upload_errors_say_what_to_do(server):
    status, _, page = server.upload([])
    assert status == 400 and "no file was uploaded" in page
    status, _, page = server.request("POST", "/analyze", b"x=1", {"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 415 and "multipart/form-data" in page
    status, _, page = server.upload([("notes.md", b"# not a log\n")])
    assert status == 422 and "no log could be read" in unescape(page)
    status, _, text = server.get("/report/AAAAAAAAAAAA")
    assert status == 404 and "No such report" in text
    status, _, text = server.get("/jobs")
    assert status == 404 and "--parquet" in text


def test_the_first_page_lists_the_served_folder_without_links_that_leave_it(server):
    status, headers, page = server.get("/")
    assert status == 200
    listed = re.findall(r'name="path" value="([^"]+)"', page)
    assert listed == ["cuda-oom-per-rank", "healthy"]  # not the FIFO, not the link that leads out
    csp = headers["content-security-policy"]
    nonce = re.search(r"'nonce-([^']+)'", csp).group(1)  # type: ignore[union-attr]
    assert f'<script nonce="{nonce}">' in page and "connect-src 'self'" in csp and "default-src 'none'" in csp
    assert not re.search(r'(src|href)="(https?:)?//', page), "the page loads something from elsewhere"


def test_an_upload_over_the_limit_is_refused_before_it_is_read(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    small = Server(tmp_path, "--max-upload", "1", tmpdir=scratch)
    try:
        assert [p.name[:16] for p in scratch.iterdir()] == ["correlate-serve-"]
        status, _, page = small.upload([("big.log", b"x" * (3 << 20))])
        assert status == 413 and "over the console&#x27;s limit of 1 MiB" in page
        status, _, page = small.upload([("a.log", b"x" * (1 << 19)), ("b.log", b"x" * (1 << 19)), ("c.log", b"x")])
        assert status == 413 and "the files are over the upload limit of 1 MiB" in page
        status, _, page = small.upload([("a.log", b"[rank0]: RuntimeError: CUDA error: out of memory\n")])
        assert status == 303
    finally:
        err = small.stop()
    assert small.proc.returncode == 0, err
    assert "Ctrl-C stops it" in err
    assert list(scratch.iterdir()) == [], "the temporary folder outlived the server"


def test_sigterm_stops_the_server_and_removes_its_uploads(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    s = Server(tmp_path, tmpdir=scratch)
    try:
        assert s.upload([("a.log", b"[rank0]: RuntimeError: CUDA error: out of memory\n")])[0] == 303
    finally:
        err = s.stop(signal.SIGTERM)
    assert s.proc.returncode == 0, err
    assert list(scratch.iterdir()) == []


def test_serve_refuses_a_file_for_a_folder(tmp_path):
    (tmp_path / "f.log").write_text("x")
    done = subprocess.run([sys.executable, "-m", "correlator", "serve", str(tmp_path / "f.log"), "--port", "0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and done.stderr.startswith(f"error: {tmp_path / 'f.log'}: the console serves a folder")


# --- the jobs page over a dataset ------------------------------------------------------------------


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dataset") / "ds"
    for job in ("ecc-repeat-node", "multinode-disagreeing-tables", "healthy", "cuda-oom-per-rank"):
        done = subprocess.run([sys.executable, "-m", "correlator", str(SAMPLES / job), "--parquet", str(out),
                               "--format", "json", "-o", os.devnull], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def jobs_server(dataset: Path) -> Iterator[Server]:
    s = Server(SAMPLES, "--parquet", str(dataset))
    yield s
    s.stop()


def test_jobs_page_shows_failures_by_rule_and_repeat_offenders(jobs_server, dataset):
    from correlator import history

    summary = history.summarize(dataset)
    status, _, page = jobs_server.get("/jobs")
    assert status == 200
    assert f"{summary.jobs} job(s)" in page
    repeat = page[page.index('id="repeat"'):page.index('id="by-category"')]
    assert [n.host for n in summary.repeated_roots] == ["gpu-b03"] and "gpu-b03" in repeat
    by_rule = page[page.index('id="by-rule"'):page.index('id="all-jobs"')]
    for rule in summary.rules:
        assert f"<code>{rule.rule}</code>" in by_rule
    all_jobs = page[page.index('id="all-jobs"'):]
    ids = re.findall(r'<a href="/job\?id=([^"]+)">', all_jobs)
    assert len(ids) == summary.jobs == 4
    from correlator.report.parquet import read_table

    starts = {r["job_id"]: r["job_start"] for r in read_table(dataset, "incidents").to_pylist() if r["kind"] == "verdict"}
    assert ids == sorted(starts, key=lambda j: starts[j], reverse=True)  # the latest job first


def test_a_jobs_page_link_opens_that_jobs_report(jobs_server, dataset):
    want = expected("ecc-repeat-node")
    _, _, page = jobs_server.get("/jobs")
    link = next(h for h in re.findall(r'href="(/job\?id=[^"]+)"', page) if "904871" in h)
    status, _, job = jobs_server.get(unescape(link))
    assert status == 200
    text = unescape(banner(job))
    assert text.startswith(f"rank {want['root_rank']} on {want['root_host']} failed first")
    assert want["rule"] in job and "Timeline (" in job
    # its logs are below the served folder: one click makes the full report from them
    path = re.search(r'name="path" value="([^"]+)">Its logs are still in', job).group(1)  # type: ignore[union-attr]
    full = jobs_server.followed(jobs_server.folder(unescape(path)))
    assert unescape(banner(full)) == headline(analyze([str(SAMPLES / "ecc-repeat-node")]))
    status, _, missing = jobs_server.get("/job?id=" + quote("<no such job>"))
    assert status == 404 and "&lt;no such job&gt;" in missing


def test_an_analysis_can_be_added_to_the_dataset(tmp_path):
    ds, served = tmp_path / "ds", tmp_path / "served"
    shutil.copytree(SAMPLES / "slurm-time-limit", served / "slurm-time-limit")
    (served / "anon").mkdir()
    for p in (SAMPLES / "cuda-oom-per-rank").glob("rank-*.out"):  # no slurm-<id> file: no job id
        shutil.copy(p, served / "anon" / p.name)
    s = Server(served, "--parquet", str(ds))
    try:
        status, _, page = s.get("/jobs")
        assert status == 200 and "holds no job yet" in page
        page = s.followed(s.folder("slurm-time-limit", add="1"))
        assert f"added to the dataset {ds}" in page
        s.followed(s.folder("anon", add="1", job_id="anon <1>"))  # the form's job id names it
        s.followed(s.folder("anon"))  # not asked to: not added
        status, _, page = s.get("/jobs")
        assert status == 200 and "2 job(s)" in page and "anon &lt;1&gt;" in page
        assert f'href="/job?id={quote("anon <1>", safe="")}"' in page
        link = next(h for h in re.findall(r'href="(/job\?id=[^"]+)"', page) if "anon" not in h)
        assert "make the full report" in s.get(unescape(link))[2]
        shutil.rmtree(served / "slurm-time-limit")  # its logs are gone: the job's page offers no full report
        status, _, job = s.get(unescape(link))
        assert status == 200 and "make the full report" not in job and "job-level reason" in unescape(banner(job))
    finally:
        s.stop()


# --- in real Chromium --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    b = Browser(tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


def _fresh(browser: Browser, url: str) -> None:
    """Open ``url`` with what earlier tests left in the event list forgotten (``problems`` reads it)."""
    browser.events.clear()
    browser.open(url)


def _on_report(browser: Browser) -> str:
    browser.wait_for("location.pathname.startsWith('/report/') && document.readyState === 'complete'", timeout_s=120)
    return str(browser.js("document.querySelector('.banner').textContent"))


def test_in_chromium_picking_a_sample_jobs_files_shows_its_verdict(server, browser):
    job = SAMPLES / "cuda-oom-per-rank"
    _fresh(browser, server.url)
    assert browser.js("document.querySelector('h1').textContent") == "Analyse a job's logs"
    browser.set_files("#files", sorted(p for p in job.iterdir() if p.suffix == ".out"))
    assert browser.js("document.getElementById('files').files.length") == 17
    browser.js("document.getElementById('analyse').click(); true")
    text = _on_report(browser)
    want = expected("cuda-oom-per-rank")
    assert text.strip() == headline(analyze([str(job)]))
    assert f"rank {want['root_rank']} on {want['root_host']} failed first" in text
    assert browser.problems() == []
    browser.js("document.querySelector('nav a').click(); true")
    browser.wait_for("location.pathname === '/' && document.readyState === 'complete'")


def test_in_chromium_a_folder_of_the_listing_and_a_dropped_file(server, browser):
    _fresh(browser, server.url)
    browser.js("Array.from(document.querySelectorAll('#entries button')).find(b => b.textContent === 'healthy/')"
               ".click(); true")
    assert "no failure" in _on_report(browser)
    # the drop zone's path: files sent by the page's script (fetch), a hostile name and text with them
    _fresh(browser, server.url)
    log = ("[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered "
           "<img src=x onerror=\"document.title='pwned'\">\n")
    browser.js(f"window.correlateSend([[new File([{json.dumps(log)}], 'x.log'), 'job/<b>rank-0</b>.log']]); true")
    text = _on_report(browser)
    assert "illegal memory access" in text or "failed first" in text
    assert browser.js("document.title") != "pwned" and browser.js("document.querySelectorAll('img').length") == 0
    assert browser.problems() == []


def test_in_chromium_an_error_is_shown_in_the_page(server, browser):
    _fresh(browser, server.url)
    browser.js("document.getElementById('path').value = '../outside'; document.getElementById('read').click(); true")
    browser.wait_for("document.getElementById('error') !== null && document.readyState === 'complete'")
    assert "is not below the served folder" in str(browser.js("document.getElementById('error').textContent"))
    _fresh(browser, server.url)
    browser.js("window.correlateSend([[new File(['# notes'], 'notes.md'), 'notes.md']]); true")
    browser.wait_for("document.getElementById('status').textContent.indexOf('no log could be read') >= 0")
    assert browser.js("location.pathname") == "/"


def test_in_chromium_picking_a_folder_keeps_its_layout(server, browser):
    """A torchelastic --log-dir picked as a folder: the browser sends each file's path inside it, and
    the attempt and local-rank folders that name the writers survive the upload."""
    job = SAMPLES / "torchelastic-logdir"
    _fresh(browser, server.url)
    browser.set_files("#folder", [job])
    browser.wait_for("document.getElementById('folder').files.length > 0")  # a folder is listed asynchronously
    names = browser.js("Array.from(document.getElementById('folder').files).map(f => f.webkitRelativePath)")
    assert "torchelastic-logdir/node-0/640052_8nd2v7uw/attempt_0/3/stderr.log" in names  # type: ignore[operator]
    browser.js("document.getElementById('analyse').click(); true")
    assert _on_report(browser).strip() == headline(analyze([str(job)]))
    read = str(browser.js("document.querySelector('nav span').textContent"))
    assert read.startswith(f"read: {len(names)} uploaded file(s)") and "attempt_0/" in read  # type: ignore[arg-type]
    assert browser.problems() == []
