"""Hostile input, secrets: every kind of credential that reaches a log is masked in every output.

One table, ``KINDS``: a realistic log line per kind of secret, the secret's sensitive part (what must
appear nowhere), the mask that must appear instead, and a piece of a file name that carries the
same secret. The matrix test copies a real sample job (``sample_logs/cuda-oom-per-rank``) into a
temporary folder, inserts the lines among the root rank's lines (just before its failure, so that
they are its evidence, its timeline events and its context), moves the root rank's file under
folders named with the secrets, runs the real CLI for each output format (terminal, JSON,
Markdown, HTML, trace, and ``--parquet DIR`` read back with pyarrow) and looks for the secrets.
The same jobs analysed without masking show every secret in every output (the matrix is not empty
by construction). Ordinary log text (every sample job and real log of the repository) is left
exactly as it was.

All secrets here are made up, from a seeded generator; they only have the shape of real ones.
"""

from __future__ import annotations

import json
import random
import shutil
import string
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from correlator.report.redact import MASK, redact, redact_report

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_logs" / "cuda-oom-per-rank"
ROOT_FILE = "rank-5.out"  # the root rank's own file in that job (expected.toml: root_rank = 5)
OUTPUTS = ("terminal", "json", "markdown", "html", "trace", "parquet")
ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"


def _tok(seed: str, n: int, alphabet: str = ALNUM) -> str:
    """A made-up secret of ``n`` characters, the same in every run, different for every seed; with a
    capital, a small letter and a digit when the alphabet has them (as generated keys do)."""
    rnd = random.Random(seed)
    while True:
        s = "".join(rnd.choice(alphabet) for _ in range(n))
        if all(any(c in cls for c in s) for cls in (string.ascii_uppercase, string.ascii_lowercase, string.digits)
               if any(c in cls for c in alphabet)):
            return s


@dataclass(frozen=True)
class Kind:
    line: str  # the log line, as a program prints it
    secrets: tuple[str, ...]  # what must appear nowhere once masked (a split secret has two parts)
    mask: str  # what must appear instead (free of quotes and <>&, which renderers escape)
    piece: str  # a piece of a file name with the secret ("/" makes folders of it)


def _kinds() -> dict[str, Kind]:
    k: dict[str, Kind] = {}

    def add(name: str, line: str, secret: str | tuple[str, ...], mask: str, piece: str) -> None:
        k[name] = Kind(line, secret if isinstance(secret, tuple) else (secret,), mask, piece)

    # --- the shapes masked before this round -------------------------------------------------------
    hf = "hf_" + _tok("hf", 34, string.ascii_letters)
    add("huggingface", f"huggingface_hub.errors.HfHubHTTPError: 401 Client Error: Unauthorized ({hf})", hf[3:],
        "hf_***", hf)
    hf2 = "hf_" + _tok("hf-arg", 34, string.ascii_letters)
    add("huggingface-arg", f"ValueError: bad arguments Namespace(model='llama', hf_token='{hf2}', bf16=True)", hf2[3:],
        "hf_token=", f"hf_token={hf2}")
    akia = "AKIA" + _tok("akia", 16, string.ascii_uppercase + string.digits)
    add("aws-access-key-id", f"botocore.exceptions.ClientError: An error occurred (InvalidAccessKeyId): {akia}",
        akia[4:], "AKIA***", akia)
    aws = _tok("aws-secret", 40, ALNUM + "+")
    add("aws-secret-env", f"RuntimeError: environment rejected: AWS_SECRET_ACCESS_KEY={aws} AWS_REGION=us-east-1",
        aws, "AWS_SECRET_ACCESS_KEY=***", f"AWS_SECRET_ACCESS_KEY={aws}")
    aws2 = _tok("aws-secret-json", 40, ALNUM + "+")
    add("aws-secret-json", f'botocore.exceptions.NoCredentialsError: credentials {{"SecretAccessKey": "{aws2}"}}',
        aws2, "***", f"SecretAccessKey={aws2}")
    ghp = "ghp_" + _tok("ghp", 36)
    add("github-classic", f"RuntimeError: git push of the checkpoint failed with {ghp}", ghp[4:], "gh_***", ghp)
    pat = "github_pat_" + _tok("pat1", 22) + "_" + _tok("pat2", 59)
    add("github-fine-grained", f"subprocess.CalledProcessError: Command 'GH_TOKEN={pat} gh release download' "
        f"returned non-zero exit status 1.", pat[11:], "GH_TOKEN=***", pat)
    wb = _tok("wandb-env", 40, HEX)
    add("wandb-env", f"wandb.errors.CommError: WANDB_API_KEY={wb} was rejected", wb, "WANDB_API_KEY=***",
        f"WANDB_API_KEY={wb}")
    wb2 = _tok("wandb-login", 40, HEX)
    add("wandb-login", f"subprocess.CalledProcessError: Command 'wandb login {wb2}' returned non-zero exit status 1.",
        wb2, "wandb login ***", f"wandb login {wb2}")
    wb3 = _tok("wandb-call", 40, HEX)
    add("wandb-login-call", f'wandb.errors.UsageError: wandb.login(key="{wb3}") failed', wb3, "***",
        f"wandb.login(key={wb3})")
    wb4 = _tok("wandb-netrc", 40, HEX)
    add("netrc", f"RuntimeError: bad .netrc line: machine api.wandb.ai login user password {wb4}", wb4,
        "password ***", f"login user password {wb4}")
    wv1 = "wandb_v1_" + _tok("wv1a", 32) + "_" + _tok("wv1b", 48)
    add("wandb-v1", f"wandb.errors.AuthenticationError: API key {wv1} is invalid", wv1[9:], "wandb_v1_***", wv1)
    oai = "sk-proj-" + _tok("openai", 40)
    add("openai", f"openai.AuthenticationError: Incorrect API key provided: {oai}", oai[8:], "sk-***", oai)
    opaque = _tok("bearer", 40, ALNUM + "-._~")
    add("bearer", f"RuntimeError: request to the registry failed after sending Bearer {opaque}", opaque,
        "Bearer ***", f"Bearer {opaque}")
    basic = _tok("basic", 28) + "=="
    add("authorization-basic", f"requests.exceptions.HTTPError: 401 for headers {{'Authorization': 'Basic {basic}'}}",
        basic, "Authorization", f"Authorization: Basic {basic}")
    pw1 = _tok("pw-kv", 14, ALNUM + "-!")
    add("password-kv", f"psycopg2.OperationalError: connection to db failed: password={pw1} host=db", pw1,
        "password=***", f"password={pw1}")
    pw2 = _tok("pw-opt", 14, ALNUM + "-!")
    add("password-option", f"subprocess.CalledProcessError: Command 'python sync.py --password {pw2} --epochs 3' "
        f"returned non-zero exit status 2.", pw2, "--password ***", f"--password {pw2}")
    pw3 = _tok("pw-opt-eq", 14, ALNUM + "-!")
    add("password-option-eq", f"RuntimeError: mlflow server --db-password={pw3} exited with 1", pw3,
        "--db-password=***", f"--db-password={pw3}")
    pw4 = _tok("pw-yaml", 14, ALNUM + "-!")
    add("password-yaml", f"yaml.constructor.ConstructorError: in cfg.yaml, DB_PASSWORD: '{pw4}'", pw4, "DB_PASSWORD",
        f"DB_PASSWORD: {pw4}")
    pw5 = _tok("pw-url", 14)
    add("url-credentials", f"OSError: [Errno 5] Input/output error: 'https://ckptuser:{pw5}@store.example.com/c.pt'",
        pw5, "https://***:***@store.example.com", f"https%3A%2F%2Fckptuser%3A{pw5}%40store.example.com")
    pw6 = _tok("pw-redis", 14)
    add("url-credentials-no-user", f"redis.exceptions.ConnectionError: Error connecting to redis://:{pw6}@cache:6379/0",
        pw6, "redis://***:***@cache", f"redis%3A%2F%2F%3A{pw6}%40cache")
    body = _tok("pem-1", 64, ALNUM + "+")
    add("private-key-one-string", f"ValueError: Could not deserialize key data: b'-----BEGIN RSA PRIVATE KEY-----\\n"
        f"{body}\\n{_tok('pem-2', 64, ALNUM + '+')}\\n-----END RSA PRIVATE KEY-----\\n'", body,
        "-----BEGIN PRIVATE KEY-----***", f"-----BEGIN RSA PRIVATE KEY-----{body}")
    body2 = _tok("pem-3", 64, ALNUM + "+")
    add("private-key-begin-only", f"ValueError: Could not deserialize key data: -----BEGIN OPENSSH PRIVATE KEY----- "
        f"{body2}", body2, "-----BEGIN PRIVATE KEY-----***", f"-----BEGIN OPENSSH PRIVATE KEY-----{body2}")
    xoxb = "xoxb-" + _tok("xoxb-1", 12, string.digits) + "-" + _tok("xoxb-2", 24)
    add("slack-bot-token", f"slack_sdk.errors.SlackApiError: invalid_auth for {xoxb}", xoxb[5:], "xox-***", xoxb)
    tw = _tok("token-word", 32)
    add("token-word", f"RuntimeError: refresh failed for token {tw}", tw, "token ***", f"token {tw}")

    # --- issue 17, item 11 ------------------------------------------------------------------------
    jwt = "eyJ" + _tok("jwt-h", 30) + ".eyJ" + _tok("jwt-p", 60) + "." + _tok("jwt-s", 43, ALNUM + "-_")
    add("jwt", f"jwt.exceptions.ExpiredSignatureError: Signature has expired: {jwt}", jwt[3:], "eyJ***", jwt)
    hook = _tok("slack-hook", 24)
    add("slack-webhook", f"requests.exceptions.HTTPError: 404 Client Error: Not Found for url: "
        f"https://hooks.slack.com/services/T0ABCDEFG/B0HIJKLMN/{hook}", hook, "hooks.slack.com/services/***",
        f"hooks.slack.com/services/T0ABCDEFG/B0HIJKLMN/{hook}")
    aiza = "AIza" + _tok("aiza", 35, ALNUM + "-_")
    add("google-api-key", f"google.api_core.exceptions.PermissionDenied: 403 API key not valid: {aiza}", aiza[4:],
        "AIza***", aiza)
    pkid = _tok("gcp-pkid", 40, HEX)
    add("gcp-private-key-id", f'google.auth.exceptions.MalformedError: {{"type": "service_account", '
        f'"private_key_id": "{pkid}", "client_email": "trainer@proj.iam.gserviceaccount.com"}}', pkid,
        "private_key_id", f"private_key_id={pkid}")
    azk = _tok("azure-key", 86, ALNUM + "+") + "=="
    add("azure-account-key", f"ValueError: Connection string is invalid: DefaultEndpointsProtocol=https;"
        f"AccountName=ckpts;AccountKey={azk};EndpointSuffix=core.windows.net", azk, "AccountKey=***",
        f"AccountKey={azk}")
    sig = _tok("sas-1", 20) + "%2B" + _tok("sas-2", 20) + "%3D"
    add("azure-sas", f"azure.core.exceptions.ResourceNotFoundError: c.pt?sv=2022-11-02&sp=r&se=2026-03-03T00:00Z"
        f"&sig={sig} on ckpts.blob.core.windows.net", sig, "sig=***", f"c.pt?sv=2022-11-02&sp=r&sig={sig}")
    sk = _tok("django-secret", 50, ALNUM + "!@#%^-_=+")
    add("secret-key-env", f"RuntimeError: settings rejected: SECRET_KEY={sk} DEBUG=0", sk, "SECRET_KEY=***",
        f"SECRET_KEY={sk}")
    jsk = _tok("jwt-secret", 32)
    add("jwt-secret-key-env", f"RuntimeError: token service exited: JWT_SECRET_KEY={jsk}", jsk, "JWT_SECRET_KEY=***",
        f"JWT_SECRET_KEY={jsk}")
    pg = _tok("pgpassword", 16)
    add("pgpassword", f"subprocess.CalledProcessError: Command 'PGPASSWORD={pg} psql -h db -U trainer' returned "
        f"non-zero exit status 2.", pg, "PGPASSWORD=***", f"PGPASSWORD={pg}")
    dbp = _tok("db-pass", 12)
    add("db-pass", f"sqlalchemy.exc.OperationalError: login failed with DB_PASS={dbp} DB_HOST=db", dbp, "DB_PASS=***",
        f"DB_PASS={dbp}")
    stripe = "sk_live_" + _tok("stripe", 24)
    add("stripe", f"stripe.error.AuthenticationError: Invalid API Key provided: {stripe}", stripe[8:], "sk_live_***",
        stripe)
    glpat = "glpat-" + _tok("glpat", 20, ALNUM + "-_")
    add("gitlab", f"RuntimeError: git fetch failed: HTTP Basic: Access denied for {glpat}", glpat[6:], "glpat-***",
        glpat)
    pypi = "pypi-AgEIcHlwaS5vcmc" + _tok("pypi", 140, ALNUM + "-_")
    add("pypi", f"RuntimeError: twine upload failed: 403 Invalid or non-existent authentication for {pypi}",
        pypi[8:], "pypi-***", pypi)
    kag = _tok("kaggle", 32, HEX)
    add("kaggle", f'ValueError: kaggle.json is not valid: {{"username":"alice","key":"{kag}"}}', kag, "***",
        f'kaggle "key":"{kag}"')
    sess = _tok("sessionid", 32, string.ascii_lowercase + string.digits)
    add("cookie-sessionid", f"requests.exceptions.HTTPError: 403 Forbidden with headers {{'Cookie': 'sessionid={sess}; "
        f"csrftoken={_tok('csrf', 32)}'}}", sess, "Cookie", f"Cookie: sessionid={sess}")
    amz = _tok("amz-sig", 64, HEX)
    add("s3-presigned", f"botocore.exceptions.ClientError: 403 Forbidden: c.pt?X-Amz-Expires=3600"
        f"&X-Amz-Signature={amz}&X-Amz-SignedHeaders=host", amz, "X-Amz-Signature=***",
        f"c.pt?X-Amz-Expires=3600&X-Amz-Signature={amz}")
    sshp = _tok("sshpass", 14, ALNUM + "!%")
    add("sshpass", f"subprocess.CalledProcessError: Command 'sshpass -p {sshp} ssh gpu-c01 nvidia-smi' returned "
        f"non-zero exit status 5.", sshp, "sshpass -p ***", f"sshpass -p {sshp}")
    # a Hugging Face token cut by a \r frame: the error in the frame before the cut, and after it
    split1 = "hf_" + _tok("hf-split-1", 34, string.ascii_letters)
    add("hf-token-split-by-frame", f"OSError: could not log in with token {split1[:15]}\r{split1[15:]}: 401",
        (split1[3:15], split1[15:]), "hf_***", f"{split1[:15]}\r{split1[15:]}")
    split2 = "hf_" + _tok("hf-split-2", 34, string.ascii_letters)
    add("hf-token-split-last-frame", f"Logging in with {split2[:12]}\r{split2[12:]} OSError: 401 Client Error",
        (split2[3:12], split2[12:]), MASK, f"{split2[:12]}\r{split2[12:]}")
    hf3 = "hf_" + _tok("hf-file", 34, string.ascii_letters)
    add("hf-token-in-file-name", f"OSError: [Errno 5] Input/output error: '/lustre/ckpt/llama_{hf3}/step_1200.pt'",
        hf3[3:], "llama_hf_***", f"llama_{hf3}")
    return k


KINDS = _kinds()
#: kinds per job: the terminal shows the first three evidence lines of the root cause
GROUP = 3
GROUPS = [sorted(KINDS)[i:i + GROUP] for i in range(0, len(KINDS), GROUP)]


def test_the_table_covers_enough_kinds():
    assert len(KINDS) >= 36
    secrets = [s for kind in KINDS.values() for s in kind.secrets]
    assert len(set(secrets)) == len(secrets), "every kind has its own secret"


@pytest.mark.parametrize("name", sorted(KINDS))
def test_each_kind_is_masked_in_its_line_and_its_file_name(name):
    kind = KINDS[name]
    names = [f"/scratch/jobs/{kind.piece}/{ROOT_FILE}"] + ([f"/scratch/jobs/rank-5.{kind.piece}.out"] if "/" not in kind.piece else [])
    for text in (kind.line, *names):
        out = redact(text)
        assert not [s for s in kind.secrets if s in out], out
        assert MASK in out, out
    assert kind.mask in redact(kind.line)
    assert redact(redact(kind.line)) == redact(kind.line)


# --- the matrix: kinds x outputs, through the real CLI on a real job ----------------------------------

def _job_with(tmp: Path, names: list[str]) -> Path:
    """``sample_logs/cuda-oom-per-rank`` with the kinds' lines among rank 5's lines, just before its
    CUDA OOM, and its file moved under folders named with the kinds' pieces, and renamed with one."""
    job = tmp / "job"
    shutil.copytree(SAMPLE, job)
    src = job / ROOT_FILE
    lines = src.read_bytes().decode().split("\n")
    at = next(i for i, line in enumerate(lines) if "OutOfMemoryError" in line)
    lines[at:at] = [KINDS[n].line for n in names]
    folder = job.joinpath(*(KINDS[n].piece for n in names))
    folder.mkdir(parents=True)
    # and in the file's own name, when a piece can be one (no "/")
    base = next((f"{Path(ROOT_FILE).stem}.{KINDS[n].piece}.out" for n in names if "/" not in KINDS[n].piece), ROOT_FILE)
    (folder / base).write_bytes("\n".join(lines).encode())
    src.unlink()
    return job


def _parquet_text(folder: Path) -> str:
    import pyarrow.parquet as pq

    files = sorted(folder.rglob("*.parquet"))
    assert files, "no parquet written"
    # the files' names too: a partition folder is named after a value of the report
    return "\n".join([str(f.relative_to(folder)) for f in files]
                     + [json.dumps(pq.read_table(f).to_pylist(), default=str) for f in files])


def _cli_outputs(tmp: Path, job: Path, *extra: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for fmt in OUTPUTS[:-1]:
        args = [str(job), "--tz", "UTC", "-j", "1", "-f", fmt, *extra]
        if fmt == "json":
            args += ["--parquet", str(tmp / "pq")]
        r = subprocess.run([sys.executable, "-m", "correlator", *args], capture_output=True, timeout=300, cwd=ROOT)
        assert r.returncode == 0, r.stderr.decode()
        out[fmt] = r.stdout.decode()
    out["parquet"] = _parquet_text(tmp / "pq")
    return out


def _in_process_outputs(tmp: Path, job: Path, redact: bool = False) -> dict[str, str]:
    """The same outputs from the pipeline and the renderers the CLI calls (masked or not)."""
    from correlator import pipeline
    from correlator.report import render
    from correlator.report.parquet import write_parquet

    report = pipeline.analyze([str(job)], pipeline.Options(tz="UTC", workers=1, redact=redact))
    out = {fmt: render(report, fmt) for fmt in OUTPUTS[:-1]}
    where = tmp / ("pq-masked" if redact else "pq-raw")
    write_parquet(report, where, report.job.id)
    out["parquet"] = _parquet_text(where)
    return out


@pytest.mark.parametrize("names", GROUPS, ids=["+".join(g) for g in GROUPS])
def test_matrix_kinds_by_outputs(tmp_path, names):
    """Every kind x every output: the secret's sensitive part appears nowhere, the mask does;
    unmasked, the same job shows every secret in every output. The first group goes through the
    real CLI (one process per output); the others through the pipeline and renderers the CLI calls,
    masked as the CLI masks (the whole matrix through the CLI cost 75 processes, minutes of the
    suite's five)."""
    job = _job_with(tmp_path, names)
    raw = _in_process_outputs(tmp_path, job)
    outs = _cli_outputs(tmp_path, job) if names == GROUPS[0] else _in_process_outputs(tmp_path, job, redact=True)
    assert json.loads(outs["json"])["root_cause"]["rank"] == 5  # the job is still read as it was
    missing, leaked, unmasked = [], [], []
    for name in names:
        kind = KINDS[name]
        for fmt in OUTPUTS:
            missing += [(name, fmt) for s in kind.secrets if s not in raw[fmt]]
            leaked += [(name, fmt) for s in kind.secrets if s in outs[fmt]]
            if kind.mask not in outs[fmt]:
                unmasked.append((name, fmt))
    assert not missing, f"not in the unmasked output, so not tested there: {missing}"
    assert not leaked, f"secret in the output: {leaked}"
    assert not unmasked, f"no mask in the output: {unmasked}"


# --- no false masks -----------------------------------------------------------------------------------

#: ordinary text that looks a little like the shapes above; none of it may change
NEAR_MISSES = [
    "gpu-c01:12345:12399 [5] NCCL INFO comm 0x55d0a1b2c3d0 rank 5 nranks 16 cudaDev 5 busId 9a000 - Init COMPLETE",
    "gpu-c01:12345:12399 [5] NCCL INFO Channel 00/0 : 5[5] -> 6[6] via P2P/IPC/read busId 9a000 -> a0000",
    "NCCL version 2.21.5+cuda12.4 (git 3c5a5c3b0f8e2a9d1c4b7e6f5a4d3c2b1a0f9e8d)",
    "PyTorch version 2.5.1+cu124 git_version=a8d6afb511a69687bbb2b7e88a3cf67917e1697e",
    "transformers 4.46.0.dev0 @ commit 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b",
    ("iteration     1200/  500000 | consumed samples: 614400 | elapsed time per iteration (ms): 850.2 | "
     "learning rate: 2.999E-04 | lm loss: 2.310E+00 | number of nan iterations:   0 |"),
    "2026-03-02 14:07:31,412 - train - INFO - step=1200 loss=2.31 tokens_per_sec=51234.5 step_time=0.85s",
    " 45%|████▌     | 9/20 [00:01<00:02,  5.61it/s]\r 50%|█████     | 10/20 [00:01<00:01,  5.62it/s]",
    "Downloading shards: 100%|██████████| 4/4 [00:12<00:00,  3.01s/it]\rLoading checkpoint shards:  25%|██▌",
    "KeyError: 'model.layers.0.self_attn.q_proj.weight'",
    "sort_key=train_loss_epoch cache_key: step_1200 first_pass=done bypass_cache=1 num_pass=3",
    "NCCL_IB_PKEY=0 TOKENIZERS_PARALLELISM=false HF_HUB_ENABLE_HF_TRANSFER=1 WANDB_MODE=offline",
    "HF_TOKEN_PATH=/root/.cache/huggingface/token SSH_KEY=~/.ssh/id_ed25519 TLS_KEY=/etc/ssl/private/node.pem",
    "use_auth_token=True hf_token=None password=null DB_PASSWORD=${DB_PASSWORD} api_key=<your key>",
    "The `use_auth_token` argument is deprecated and will be removed in v5 of Transformers; use `token` instead",
    "Timezone Asia/Tokyo assumed for stamps without a zone; pass --tz to change it",
    "Received signal; sig=15 (SIGTERM), shutting down the monkey-patched dataloader",
    "task-0017 disk-usage 91% risk-score 0.2 mask_ratio=0.15 ask-for-help",
    "Writing /lustre/runs/llama3_hf_export/checkpoint-1200/model.safetensors",
    "wandb: Find logs at: ./wandb/run-20260302_140731-3k2j1h0g/logs",
    "https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/main/config.json?download=true",
    "GET /api/v1/runs?page=2&per_page=50&sort=created_at HTTP/1.1 200",
]


@pytest.mark.parametrize("line", NEAR_MISSES)
def test_near_misses_are_left_alone(line):
    assert redact(line) == line


def _log_cases() -> list[Path]:
    return sorted(p for root in (ROOT / "sample_logs", ROOT / "tests" / "real_logs") for p in root.iterdir()
                  if (p / "expected.toml").is_file())


def test_no_line_of_the_sample_and_real_logs_is_masked():
    """Every line of every sample job and real log, and every \\r frame of it, is left exactly as it
    is: none of them holds a secret."""
    changed = []
    for case in _log_cases():
        for f in sorted(case.rglob("*")):
            if not f.is_file() or f.suffix in {".md", ".toml"}:
                continue
            for line in f.read_bytes().decode("utf-8", "replace").split("\n"):
                for text in (line, *line.split("\r")):
                    if redact(text) != text:
                        changed.append((str(f.relative_to(ROOT)), text[:200], redact(text)[:200]))
    assert not changed, changed[:10]


def test_no_rule_text_is_masked():
    """What the rules say (titles, mechanism, fix, confirm steps, examples) reaches every report."""
    import dataclasses

    from correlator.ruleset import load_rules

    def strings(v):
        if isinstance(v, str):
            yield v
        elif isinstance(v, (list, tuple, set, frozenset)):
            for x in v:
                yield from strings(x)
        elif isinstance(v, dict):
            for x in v.values():
                yield from strings(x)
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            for f in dataclasses.fields(v):
                yield from strings(getattr(v, f.name))

    changed = sorted({(r.id, s[:200]) for r in load_rules() for s in strings(r) if redact(s) != s})
    assert not changed, changed[:10]


@pytest.mark.slow
def test_masked_report_equals_the_unmasked_one():
    """The report of every sample job and real log is the same masked and unmasked: nothing in them
    is a secret (a case that holds one would be listed here with what it holds)."""
    from correlator.pipeline import Options, analyze

    differ = []
    for case in _log_cases():
        report = analyze([str(case)], Options(tz="UTC", workers=1, redact=False))
        if redact_report(report) != report:
            differ.append(case.name)
    assert not differ, differ


# --- a secret cut in two --------------------------------------------------------------------------------

def test_a_token_cut_by_a_progress_frame():
    """``hf_abc\\rdef...``: the raw line (kept whole where it is context) has the token in two frames;
    the event keeps only the frame with the error, which starts with the token's second half and has
    no shape left to recognise. The whole line masks across the cut, and what it learnt masks the
    frame wherever else it is in the report."""
    from correlator.model import Evidence

    token = "hf_" + _tok("cut", 34, string.ascii_letters)
    raw = f"Logging in with {token[:12]}\r{token[12:]} OSError: 401 Client Error"
    frame = raw.split("\r")[-1]
    assert redact(raw) == "Logging in with hf_*** OSError: 401 Client Error"
    report = (Evidence("rank-5.out", 61, frame), ("a line before", raw, ">>", "a line after"))
    out = repr(redact_report(report))
    assert token[3:12] not in out and token[12:] not in out, out
    assert "*** OSError: 401 Client Error" in out
    # the frame before the cut, on its own (the error in it): the token's start at the end of the text
    assert redact(f"OSError: could not log in with token {token[:15]}") == "OSError: could not log in with token hf_***"


#: tokens of several shapes, cut by a \r frame inside the line that is the root failure itself
#: (the error in the last frame, which starts with the token's second half), cut at several places
ROOT_LINE_CUTS = {
    f"{name}-at-{cut}": (token, cut)
    for name, token in (("hf", "hf_" + _tok("root-cut-hf", 34, string.ascii_letters)),
                        ("github", "ghp_" + _tok("root-cut-gh", 36)),
                        ("aws", "AKIA" + _tok("root-cut-aws", 16, string.ascii_uppercase + string.digits)))
    for cut in (4, 9, 15)
}


@pytest.mark.parametrize("case", sorted(ROOT_LINE_CUTS))
def test_matrix_a_token_cut_by_a_frame_in_the_root_line(tmp_path, case):
    """``Logging in with hf_abc\\rdef… torch.cuda.OutOfMemoryError``: the root event keeps the last
    frame, whose start is the token's second half, a bare run of letters with no shape left; no
    other line of the report holds the whole line. The extractor keeps the run's start from the
    frame before (joined by the ``\\r``), so masking reads the token across the cut: no piece of it in
    any of the six outputs (before: the second half in all of them), and the root is unchanged."""
    token, cut = ROOT_LINE_CUTS[case]
    job = tmp_path / "job"
    shutil.copytree(SAMPLE, job)
    src = job / ROOT_FILE
    lines = src.read_bytes().decode().split("\n")
    at = next(i for i, line in enumerate(lines) if "OutOfMemoryError" in line)
    lines[at] = f"Logging in with {token[:cut]}\r{token[cut:]} {lines[at]}"
    src.write_bytes("\n".join(lines).encode())
    raw = _in_process_outputs(tmp_path, job)
    outs = _in_process_outputs(tmp_path, job, redact=True)
    assert json.loads(outs["json"])["root_cause"]["rank"] == 5
    second = token[cut:]
    assert all(second in raw[fmt] for fmt in OUTPUTS), [fmt for fmt in OUTPUTS if second not in raw[fmt]]
    leaked = [fmt for fmt in OUTPUTS if second in outs[fmt] or token[:cut] in outs[fmt] and cut > 4]
    assert not leaked, leaked
    assert all(MASK + " torch.cuda.OutOfMemoryError" in outs[fmt] for fmt in ("json", "markdown", "trace"))


def test_an_event_keeps_the_run_a_frame_boundary_cuts_and_nothing_else():
    """The unit: what an event's text keeps of the frame before its own: only a run of token
    characters that the ``\\r`` cuts (16 characters or more in all) and that is no part of what the
    rule matched (it matches the frame without it); progress frames are left as they were."""
    from correlator.extract.confirmer import event_text

    def error_after(rest: str) -> bool:  # a rule that matches "OSError" or "RuntimeError: CUDA"
        return "OSError" in rest or "RuntimeError: CUDA" in rest

    token = "hf_" + _tok("unit-cut", 34, string.ascii_letters)
    msg = f"Logging in with {token[:12]}\r{token[12:]} OSError: 401 Client Error"
    frame = msg.split("\r")[-1]
    assert event_text(msg, frame, error_after) == f"{token[:12]}\r{frame}"
    assert redact(event_text(msg, frame, error_after)) == f"hf_{MASK} OSError: 401 Client Error"
    for msg in (" 45%|████▌     | 9/20 [00:01<00:02,  5.61it/s]\rTraceback (most recent call last): OSError",
                # the run after the cut is the error itself: the rule does not match without it
                "Epoch 3: 100%|██████████| 10/10\rRuntimeError: CUDA error: unspecified launch failure",
                "OSError: [Errno 5] Input/output error",
                "step_000123\rab OSError",  # too short to be a credential
                ):
        frame = msg.split("\r")[-1]
        assert event_text(msg, frame, error_after) == frame, msg
    assert event_text("OSError\rOSError", "OSError", error_after) == "OSError"  # the first frame: nothing before it


def test_a_token_cut_by_the_length_cap():
    token = "ghp_" + _tok("cap", 36)
    assert redact(f"fatal: could not read {token[:14]} …[cut]") == "fatal: could not read ghp_*** …[cut]"


def test_progress_frames_without_a_secret_are_left_alone():
    line = " 45%|████▌     | 9/20 [00:01<00:02,  5.61it/s]\r 50%|█████     | 10/20 [00:01<00:01]\rTraceback (most recent"
    assert redact(line) == line
    assert redact_report((line, "50%")) == (line, "50%")


def test_a_secret_whose_name_another_mask_took():
    """A greedy value (everything up to a space) took the option that names the next secret with it;
    that secret is still masked."""
    first, second = _tok("greedy-1", 14), _tok("greedy-2", 14)
    out = redact(f"/jobs/password={first}/--password {second}/rank-5.out")
    assert first not in out and second not in out and out.endswith("/rank-5.out"), out
