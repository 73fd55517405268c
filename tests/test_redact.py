"""Secrets never leave: every credential shape is masked in every output format, on by default,
off with ``--no-redact``; ordinary log text is left alone.

All secrets here are made up; they only have the shape of real ones.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from jobs import T0, combined_srun, py, rank_lines

from correlator.model import Diagnostic, Evidence, TimelineEvent
from correlator.report.redact import MASK, redact, redact_report

ROOT = Path(__file__).resolve().parent.parent

# name -> (a log message that carries it, the secret itself)
HF = "hf_" + "Qx7Lm2Np9Rs4Tv6Wy8Za1Bc3De5Fg7Hj9K"
AWS_ID = "AKIA" + "Z7QX4M2P9L3K8N5R"
AWS_SECRET = "wJalrXUtnFEMIK7MDENGbPxRfiCYq8T2zSecret"
GHP = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
GH_PAT = "github_pat_" + "11ABCDEFG0" + "x" * 12 + "_" + "Yz9" * 19 + "Q"
WANDB = "9f8e7d6c5b4a39281706f5e4d3c2b1a098765432"
WANDB_V1 = "wandb_v1_" + "Kq3Zr8Tn2Vx5Lp7Mh4Jd9Fs6Gb1Nc0Wy" + "_" + "Pt5Rk8Ls2Qm7Vn4Xb9Zc3Hd6Jf1Gw0Ty" + "Ab12Cd34Ef56Gh78"
OPENAI = "sk-proj-" + "T3BlbkFJq9Xv2Lm7Np4Rs8Tu1Wx5Yz0Ab6Cd3Ef"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlMTIzNDU2Nzg5MA"
BASIC = "dXNlcjpzM2NyZXRQYXNzdzByZA=="
PASSWORD = "Tr0ub4dor-and-3"
URL_PASSWORD = "hunter2pass"
KEY_BODY = ["MIIEowIBAAKCAQEAx9rTq2mZ8k3Lp0v7YbN4cQ1sW6eR5tU8iO2pA3sD4fG5hJ6k",
            "L7zX8cV9bN0mQ1wE2rT3yU4iO5pA6sD7fG8hJ9kL0zX1cV2bN3mQ4wE5rT6yU7i",
            "O8pA9sD0fG1hJ2k3L4zX5cV6bN7mQ8wE9rT0yU1iO2pA3sD4fG5hJ6kL7zX8cV9",
            "bN0mQ1wE2rT3yU4iO5pA6sD7fG8hJ9kLQ=="]

SECRETS: dict[str, tuple[str, str]] = {
    "huggingface": (f"huggingface_hub.errors.HfHubHTTPError: 401 Client Error: Unauthorized for url: "
                    f"https://huggingface.co/api/whoami-v2 (HF_TOKEN={HF})", HF),
    "huggingface-arg": (f"Namespace(model='llama', hf_token='{HF}', bf16=True)", HF),
    "aws-access-key": (f"botocore.exceptions.ClientError: An error occurred (InvalidAccessKeyId): key {AWS_ID}", AWS_ID),
    "aws-secret-key": (f"export AWS_ACCESS_KEY_ID={AWS_ID} AWS_SECRET_ACCESS_KEY={AWS_SECRET}", AWS_SECRET),
    "aws-secret-json": (f'credentials: {{"AccessKeyId": "{AWS_ID}", "SecretAccessKey": "{AWS_SECRET}"}}', AWS_SECRET),
    "github-classic": (f"fatal: could not push with token {GHP}", GHP),
    "github-fine-grained": (f"GH_TOKEN={GH_PAT} gh release download failed", GH_PAT),
    "wandb-env": (f"WANDB_API_KEY={WANDB} wandb: ERROR Error while calling W&B API", WANDB),
    "wandb-login": (f"+ wandb login {WANDB}", WANDB),
    "wandb-login-call": (f'wandb.login(key="{WANDB}") raised', WANDB),
    "wandb-netrc": (f"machine api.wandb.ai login user password {WANDB}", WANDB),
    "wandb-v1": (f"wandb.errors.AuthenticationError: API key {WANDB_V1} is invalid", WANDB_V1),
    "openai": (f"openai.AuthenticationError: Incorrect API key provided: {OPENAI}", OPENAI),
    "bearer": (f"requests.exceptions.HTTPError: 403 with headers {{'Authorization': 'Bearer {JWT}'}}", JWT),
    "authorization-basic": (f"Authorization: Basic {BASIC}", BASIC),
    "password-kv": (f"psycopg2.OperationalError: connection to db failed: password={PASSWORD} host=db", PASSWORD),
    "password-option": (f"python train.py --password {PASSWORD} --epochs 3", PASSWORD),
    "password-option-eq": (f"mlflow server --db-password={PASSWORD}", PASSWORD),
    "password-yaml": (f"DB_PASSWORD: '{PASSWORD}'", PASSWORD),
    "url-credentials": (f"OSError: [Errno 5] Input/output error: 'https://ckptuser:{URL_PASSWORD}@store.example.com/c.pt'",
                        URL_PASSWORD),
    "url-credentials-no-user": (f"redis.exceptions.ConnectionError: redis://:{URL_PASSWORD}@cache:6379/0", URL_PASSWORD),
    "private-key-one-string": ("ValueError: bad key -----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(KEY_BODY)
                               + "\n-----END RSA PRIVATE KEY-----", KEY_BODY[0]),
    "private-key-begin-only": ("ValueError: Could not deserialize key data: -----BEGIN OPENSSH PRIVATE KEY----- "
                               + KEY_BODY[0], KEY_BODY[0]),
}

ORDINARY = [
    "[E1121 10:53:32.123456789 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=301, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds",
    "gpu-a09:12345:12399 [5] NCCL INFO comm 0x55d0a1b2c3d0 rank 5 nranks 8 cudaDev 5 busId 9a000 - Init COMPLETE",
    "gpu-a09:12345:12399 [5] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.1.2.3<0>",
    "2026-03-02 14:07:31,412 - root - INFO - step=1200 loss=2.31 token_count=5 tokens_per_sec=51234.5",
    "Token indices sequence length is longer than the specified maximum sequence length for this model (600 > 512)",
    "Setting `pad_token_id` to `eos_token_id`:2 for open-end generation.",
    "Special tokens have been added in the vocabulary, make sure the associated word embeddings are fine-tuned",
    "special_tokens_map: {'bos_token': '<s>', 'eos_token': '</s>', 'pad_token': '[PAD]', 'unk_token': '<unk>'}",
    "AutoModelForTokenClassification: loading token classification head",
    "python train.py --max-new-tokens 512 --tokenizer gpt2 --password-file /run/secrets/db",
    "PWD=/home/alice/run OLDPWD=/home/alice GOOGLE_APPLICATION_CREDENTIALS=/etc/gcp/key.json",
    "torch.save(state, '/lustre/secret_project/ckpt/step_1200.pt') to /home/u/.cache/huggingface/token",
    "Segmentation fault at address 0x7f3a2b1c0000 (pc 0x00005555deadbeef)",
    "MASTER_ADDR=gpu-a01 MASTER_PORT=29500 init_method=tcp://10.0.0.1:29500 rdzv_endpoint=gpu-a01:29400",
    "wandb: Syncing run glowing-sun-12 ; View run at https://wandb.ai/team/proj/runs/3k2j1h0g",
    "commit 3c5a5c3b0f8e2a9d1c4b7e6f5a4d3c2b1a0f9e8d sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "psycopg2.OperationalError: FATAL:  password authentication failed for user \"postgres\"",
    "requests.exceptions.HTTPError: 401 Client Error: Unauthorized (authorization required)",
    "srun: error: gpu-a09: tasks 2,4-5: Exited with exit code 1",
    "slurmstepd: error: *** STEP 1234.0 ON gpu-a09 CANCELLED AT 2026-03-02T14:08:03 ***",
    "[2026-03-02 14:07:31,412] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 1234 closing signal SIGTERM",
]


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_each_shape_is_masked(name):
    line, secret = SECRETS[name]
    out = redact(line)
    assert secret not in out and MASK in out, out
    # the rest of the line is still there to read
    head = line.split(secret)[0][:12]
    assert out.startswith(head)


@pytest.mark.parametrize("line", ORDINARY)
def test_ordinary_log_text_is_left_alone(line):
    assert redact(line) == line


def test_private_key_lines_one_by_one():
    """A key printed line by line: each line is its own log line, evidence line or timeline event."""
    lines = ["-----BEGIN RSA PRIVATE KEY-----", *KEY_BODY, "-----END RSA PRIVATE KEY-----", "after the key"]
    # as a sequence of strings (context lines)
    out = redact_report(tuple(lines))
    assert not any(b in "\n".join(out) for b in KEY_BODY)
    assert out[-1] == "after the key" and out[-2] == "-----END RSA PRIVATE KEY-----"
    # as evidence items and as timeline events (the text field of consecutive dataclasses)
    ev = redact_report(tuple(Evidence("rank-3.log", i + 1, t) for i, t in enumerate(lines)))
    assert not any(b in e.text for e in ev for b in KEY_BODY) and ev[0].path == "rank-3.log"
    tl = redact_report(tuple(TimelineEvent(None, 3, None, "python.uncaught-exception", "primary", "rank-3.log", i, t)
                             for i, t in enumerate(lines)))
    assert not any(b in e.text for e in tl for b in KEY_BODY)
    assert tl[-1].text == "after the key"
    # a body line on its own, with nothing before it
    assert redact_report((KEY_BODY[1],)) == (MASK,)
    assert redact_report(("x", KEY_BODY[-1])) == ("x", MASK)


# --- every output format -----------------------------------------------------------------------------

def _secret_job(tmp_path: Path) -> Path:
    """Rank 5 fails on EIO writing to a URL with a password; the other ranks raise errors that quote
    every secret shape (they become collateral timeline events)."""
    lines = rank_lines(8, 4, 5)
    for i, line in enumerate(lines[5]):
        if "Input/output error" in line:
            lines[5][i] = SECRETS["url-credentials"][0]
    others = [r for r in range(8) if r != 5]
    later = py(T0 + timedelta(seconds=60 * 3 + 45))  # after rank 5's failure (T0 + 210 s)
    for r in others:
        lines[r].insert(-1, f"{later} - hub - INFO - pushing the checkpoint")
    for k, (_name, (line, _)) in enumerate(sorted(SECRETS.items())):
        r = others[k % len(others)]
        msg = line if line.split(":")[0].endswith(("Error", "Exception")) else f"RuntimeError: {line}"
        lines[r][-1:-1] = msg.split("\n")
    path = tmp_path / "slurm-4242.out"
    path.write_text("\n".join(combined_srun(lines, 4)) + "\n")
    return path


def _all_text(tmp_path: Path, job: Path, *extra: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for fmt in ("terminal", "json", "markdown", "html", "trace"):
        args = [str(job), "--tz", "UTC", "-f", fmt, *extra]
        if fmt == "json":
            args += ["--parquet", str(tmp_path / "pq")]
        r = subprocess.run([sys.executable, "-m", "correlator", *args], capture_output=True, timeout=120, cwd=ROOT)
        assert r.returncode == 0, r.stderr.decode()
        out[fmt] = r.stdout.decode()
    out["parquet"] = _parquet_text(tmp_path / "pq")
    return out


def _parquet_text(folder: Path) -> str:
    import pyarrow.parquet as pq

    chunks = []
    for f in sorted(folder.rglob("*.parquet")):
        chunks.append(json.dumps(pq.read_table(f).to_pylist(), default=str))
    assert chunks, "no parquet written"
    return "\n".join(chunks)


def test_no_secret_in_any_output_format(tmp_path):
    job = _secret_job(tmp_path)
    texts = _all_text(tmp_path, job)
    secrets = {s for _, s in SECRETS.values()} | set(KEY_BODY)
    for fmt, text in texts.items():
        leaked = sorted(s for s in secrets if s in text)
        assert not leaked, (fmt, leaked)
    doc = json.loads(texts["json"])
    assert doc["root_cause"]["rank"] == 5
    assert "https://***:***@store.example.com" in doc["root_cause"]["evidence"][0]["text"]


def test_no_redact_shows_them(tmp_path):
    """The other side of the test above: the secrets do reach every format that shows log text."""
    job = _secret_job(tmp_path)
    texts = _all_text(tmp_path, job, "--no-redact")
    doc = json.loads(texts["json"])
    shown = json.dumps(doc)
    for name, (_, secret) in SECRETS.items():
        if name.startswith("private-key"):
            continue  # a key's body lines follow its first line: context, not an event of their own
        assert secret in shown, name
    for fmt in ("terminal", "markdown", "html", "trace", "parquet"):
        assert URL_PASSWORD in texts[fmt], fmt


def test_every_string_of_a_report_is_masked_before_rendering(tmp_path):
    """Secrets put into every text field a renderer reads (paths, evidence lines one by one, timeline
    text, diagnostics, the job facts, the reasons) are gone from every renderer's output."""
    from correlator import pipeline
    from correlator.report import RENDERERS, render
    from correlator.report.parquet import write_parquet

    job = _secret_job(tmp_path)
    report = pipeline.analyze([str(job)], pipeline.Options(tz="UTC", workers=1, redact=False))
    rc = report.root_cause
    assert rc is not None
    key_lines = ["ValueError: -----BEGIN PRIVATE KEY-----", *KEY_BODY, "-----END PRIVATE KEY-----"]
    rc = dataclasses.replace(
        rc, evidence=rc.evidence + tuple(Evidence(f"/logs/{HF}/rank-5.log", 40 + i, t) for i, t in enumerate(key_lines)),
        why=rc.why + (f"seen with --password {PASSWORD}",))
    tl = report.timeline + tuple(dataclasses.replace(report.timeline[-1], text=t) for t in key_lines)
    dirty = dataclasses.replace(
        report, root_cause=rc, timeline=tl,
        diagnostics=report.diagnostics + (Diagnostic("warning", f"/logs/{GHP}.log", f"cannot read: token {OPENAI}"),),
        job=dataclasses.replace(report.job, hosts=(*report.job.hosts, f"https://u:{URL_PASSWORD}@h")))
    clean = redact_report(dirty)
    secrets = {s for _, s in SECRETS.values()} | set(KEY_BODY)
    for fmt in RENDERERS:
        text = render(clean, fmt)
        leaked = sorted(s for s in secrets if s in text)
        assert not leaked, (fmt, leaked)
    write_parquet(clean, tmp_path / "pq2", clean.job.id)
    text = _parquet_text(tmp_path / "pq2")
    assert not [s for s in secrets if s in text]
    # and redacting twice changes nothing more
    assert redact_report(clean) == clean
