"""Masking secrets in log text before anything is written.

Owns the list of credential shapes (Hugging Face, AWS, GitHub, GitLab, W&B, OpenAI-style, Stripe,
Slack, Google and PyPI keys, JWTs, webhook URLs, signed-URL signatures, Azure connection strings,
cookies, bearer and Authorization headers, passwords in options, URLs and ``sshpass``, values of
secret-named keys and variables, private key blocks) and applying it to every string of a
``Report``: also to a secret cut by a ``\r`` progress frame or by a length cap. Applied once, in
``pipeline``, so that every renderer (terminal, JSON, Markdown, HTML, Parquet, trace) only ever
sees masked text.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
from collections.abc import Callable
from enum import Enum
from typing import Any

from correlator.model import field_names

MASK = "***"

#: not preceded by a letter or digit: ``\b`` would miss a token after ``_`` (``run_hf_...``)
_NB = r"(?<![A-Za-z0-9])"
#: a value that is not already masked, not a placeholder (``<pad>``, ``[CLS]``, ``${VAR}``), not a
#: boolean or None, and not a file path (``/etc/gcp/key.json``, ``~/.ssh/id_rsa``)
_VALUE_GUARD = (r"(?!\*\*\*)(?![<\[$])(?!(?i:true|false|none|null|yes|no|on|off|unset)(?![^\s\"',;}{)]))"
                r"(?!(?:~|\.{1,2})?/[\w.@-]*(?:/[\w.@-]*)*(?![^\s\"',;}{)]))")
#: what ends a value written after ``=`` or ``:``
_VALUE = r"[^\s\"',;}{)]"
#: a value that looks generated (long, with a digit and a letter): what a lower-case ``..._key``
#: name must carry to be masked, so that ``sort_key=loss`` stays
_GENERATED = r"(?=[A-Za-z0-9+/=_-]*[0-9])(?=[A-Za-z0-9+/=_-]*[A-Za-z])[A-Za-z0-9+/=_-]{16,}(?![A-Za-z0-9+/=_.-])"
_SEP = r"([\"']?\s*[:=]\s*[\"']?)"
#: GitLab's token prefixes (personal, deploy, runner, pipeline trigger, CI job, feed, ...)
_GITLAB = r"gl(?:pat|dt|rt|ptt|cbt|ft|imt|oas|soat|agent)-"
_GITLAB_WORDS = ("glpat-", "gldt-", "glrt-", "glptt-", "glcbt-", "glft-", "glimt-", "gloas-", "glsoat-", "glagent-")
#: the prefixes of the tokens that "cut-token" knows
_CUT_WORDS = ("hf_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", *_GITLAB_WORDS, "wandb_v1_", "sk_live_",
              "sk_test_", "rk_live_", "rk_test_", "sk-", "pypi-ag", "aiza", "xox", "eyj", "akia", "asia")
#: for each shape, literals (lower case) of which a string that holds it holds one: a string runs
#: only the shapes whose literals it has (most log text has none of them, and runs none)
_WORDS: dict[str, tuple[str, ...]] = {
    "private-key": ("-----begin",),
    "url-credentials": ("://",),
    "url-credentials-encoded": ("%3a%2f%2f",),
    "webhook": ("hooks.slack", "discord"),
    "url-query": ("sig=", "sig%3d", "signature", "x-amz-", "x-goog-", "token", "secret", "key", "password", "sessionid"),
    "huggingface": ("hf_",),
    "github": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "gitlab": _GITLAB_WORDS,
    "wandb-v1": ("wandb_v1_",),
    "stripe": ("sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_"),
    "openai": ("sk-",),
    "pypi": ("pypi-ag",),
    "google-api-key": ("aiza",),
    "aws-access-key": ("akia", "asia", "agpa", "aida", "aroa", "anpa"),
    "slack": ("xox",),
    "bearer": ("bearer",),
    "token-word": ("token",),
    "authorization": ("authorization", "x-api-key", "api-key", "private-token"),
    "jwt": ("eyj",),
    "cookie": ("cookie",),
    "sshpass": ("sshpass",),
    "aws-secret": ("secret", "session"),
    "wandb": ("wandb",),
    "netrc": ("login",),
    "env-name": ("key", "secret", "pass", "token", "credential", "pwd"),
    "key-value": ("pass", "secret", "token", "key", "pwd", "sessionid"),
    "pass-value": ("pass",),
    "key-generated": ("key",),
    "credentials": ("credential",),
    "cli-option": ("pass", "token", "key", "secret"),
    "cut-token": _CUT_WORDS,
}

# (name, pattern, replacement). Order matters: specific shapes before generic key=value ones.
_KEY_BEGIN = r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
_KEY_END = r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
# (the patterns are compiled where a text holds one of their words: most reports hold no secret, and
# compiling all of them cost every run ~40 ms; ``re`` keeps what it compiled)
_RULES: tuple[tuple[str, str, str, frozenset[str]], ...] = tuple(
    (name, p, repl, frozenset(_WORDS[name])) for name, p, repl in (
        # a whole block in one string, or its start when the rest follows in other lines
        ("private-key", rf"(?s){_KEY_BEGIN}(?!\*\*\*).*?(?:{_KEY_END}|\Z)", "-----BEGIN PRIVATE KEY-----" + MASK),
        ("url-credentials", r"(?i)\b([a-z][a-z0-9+.-]{1,15}://)[^/\s:@]{0,256}:[^/\s@]{1,256}@", r"\1" + MASK + ":" + MASK + "@"),
        # the same, percent-encoded: a file saved under its URL's name, a URL inside a query parameter
        ("url-credentials-encoded", r"(?i)\b([a-z][a-z0-9+.-]{1,15}%3A%2F%2F)(?!\*\*\*)[^/\s:@%]{0,256}(?:%3A|:)"
                                    r"[^/\s@]{1,256}?(?:%40|@)", r"\1" + MASK + ":" + MASK + "@"),
        # webhook URLs carry their secret in the path
        ("webhook", r"(?i)\b(hooks\.slack\.com/(?:services|workflows|triggers)/|discord(?:app)?\.com/api/webhooks/)"
                    r"(?!\*\*\*)[A-Za-z0-9/_-]+", r"\1" + MASK),
        # signed URLs (S3 and GCS presigned, Azure SAS) and tokens in a query string
        ("url-query", r"(?i)((?:[?&]|%3F|%26)(?:sig|signature|x-amz-signature|x-amz-security-token|x-amz-credential"
                      r"|x-goog-signature|x-goog-credential|access_token|refresh_token|id_token|client_secret"
                      r"|api_?key|key|token|password|sessionid)(?:=|%3D))(?!\*\*\*)[^&\s\"'#<>%]+(?:%(?!26)[0-9A-Fa-f]{2}[^&\s\"'#<>%]*)*",
         r"\1" + MASK),
        ("huggingface", _NB + r"hf_[A-Za-z0-9]{20,}", "hf_" + MASK),
        ("github", _NB + r"(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}|" + _NB + r"github_pat_[A-Za-z0-9_]{22,}", "gh_" + MASK),
        ("gitlab", _NB + r"(" + _GITLAB + r")[A-Za-z0-9_-]{20,}", r"\1" + MASK),
        ("wandb-v1", _NB + r"wandb_v1_[A-Za-z0-9_]{20,}", "wandb_v1_" + MASK),
        ("stripe", _NB + r"((?:sk|rk)_(?:live|test)_|whsec_)[A-Za-z0-9]{16,}", r"\1" + MASK),
        ("openai", _NB + r"sk-(?:proj-|ant-|live-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}", "sk-" + MASK),
        ("pypi", _NB + r"pypi-Ag[A-Za-z0-9_-]{40,}", "pypi-" + MASK),
        ("google-api-key", _NB + r"AIza[0-9A-Za-z_-]{35}", "AIza" + MASK),
        ("aws-access-key", _NB + r"(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}(?![A-Za-z0-9])", "AKIA" + MASK),
        ("slack", _NB + r"xox[abposr]-[A-Za-z0-9-]{10,}", "xox-" + MASK),
        ("bearer", r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}", r"\1 " + MASK),
        # "token <value>" only when the value looks generated (long, with a digit): not "token classification",
        # not a path or an assignment after the word
        ("token-word", r"\b([Tt]oken)\s+(?![~/.])(?=[A-Za-z0-9._~+/-]*\d)[A-Za-z0-9._~+/-]{20,}={0,2}"
                       r"(?![A-Za-z0-9._~+/=-])", r"\1 " + MASK),
        ("authorization", r"(?i)\b(authorization|proxy-authorization|x-api-key|api-key|private-token)"
                          r"([\"']?\s*[:=]\s*[\"']?)(?:(?:basic|bearer|token|digest)\s+)?(?!\*\*\*)[^\s\"',;]+",
         r"\1\2" + MASK),
        # a JWT anywhere (header and payload are base64 of JSON objects: they start with eyJ)
        ("jwt", _NB + r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*", "eyJ" + MASK),
        # a cookie header holds session ids: everything up to the end of the header's value
        ("cookie", r"(?i)\b((?:set-)?cookie)([\"']?\s*:\s*[\"']?)(?!\*\*\*)[^\s\"'][^\"'\r\n]*", r"\1\2" + MASK),
        ("sshpass", r"\b(sshpass\b(?:\s+-[A-Za-oq-z]\S*)*\s+-p\s*[\"']?)(?!\*\*\*)[^\s\"']+", r"\1" + MASK),
        ("aws-secret", r"(?i)\b(aws_secret_access_key|aws_session_token|secret_?access_?key|session_?token)"
                       r"([\"']?\s*[:=]\s*[\"']?)[A-Za-z0-9/+=]{16,}", r"\1\2" + MASK),
        ("wandb", r"(?i)\b(wandb_api_key|wandb login(?: --relogin)?|wandb\.login\(\s*key\s*=)(\s*[=:]?\s*[\"']?)"
                  r"(?:local-)?[0-9a-f]{40}\b", r"\1\2" + MASK),
        # netrc lines (wandb and HF write them): machine api.wandb.ai login user password <key>
        ("netrc", r"\b(login\s+\S+\s+password\s+)(?!\*\*\*)(?![<\[$])\S+", r"\1" + MASK),
        # an environment-style name (upper case) ending in KEY, SECRET, PASS(WORD), PASSWD, TOKEN,
        # CREDENTIAL(S), or ..._PWD: its value, whatever it looks like (PGPASSWORD=, DB_PASS=, SECRET_KEY=)
        ("env-name", r"(?<![A-Za-z0-9_])((?:[A-Z0-9]+_)*[A-Z0-9]*(?:KEY|SECRET|PASS|PASSWORD|PASSWD|TOKEN|CREDENTIALS?)"
                     r"|(?:[A-Z0-9]+_)+PWD)" + _SEP + _VALUE_GUARD + _VALUE + "{3,}", r"\1\2" + MASK),
        # KEY=value, "key": "value", key='value' for secret-named keys; not special tokens (<pad>, [CLS])
        ("key-value", r"(?i)\b((?:[a-z0-9]+_)*(?:password|passwd|secret|token|api_?key|apikey|access_key|auth_key"
                      r"|client_secret|private_key(?:_id)?|account_?key|shared_?access_?key|sessionid)|(?:[a-z0-9]+_)+pwd)"
                      + _SEP + _VALUE_GUARD + _VALUE + "{3,}", r"\1\2" + MASK),
        # db_pass='...': a lower-case ..._pass name, when the value is not a plain word (first_pass=done)
        ("pass-value", r"(?i)(?<![A-Za-z0-9_])((?:[a-z0-9]+_)+pass)" + _SEP + _VALUE_GUARD
                       + r"(?=" + _VALUE + r"*[^a-z\s\"',;}{)])" + _VALUE + "{3,}", r"\1\2" + MASK),
        # any other name ending in key ("key": ... of kaggle.json, AccountKey=, encryption_key=) when
        # the value looks generated
        ("key-generated", r"(?<![A-Za-z0-9_.-])([A-Za-z][A-Za-z0-9_.-]*(?:key|Key|KEY)|key)" + _SEP + _GENERATED,
         r"\1\2" + MASK),
        # a credentials *path* (GOOGLE_APPLICATION_CREDENTIALS=/path/key.json) is not a secret
        ("credentials", r"(?i)\b((?:[a-z0-9]+_)*credentials?)([\"']?\s*[:=]\s*[\"']?)(?!\*\*\*)(?![/~.<\[])[^\s\"',;}{)]{3,}",
         r"\1\2" + MASK),
        ("cli-option", r"(?i)(--(?:[a-z0-9]+[-_])*(?:password|passwd|token|api[-_]?key|apikey|secret|access[-_]key)"
                       r"(?:=|\s+))(?!\*\*\*)(?![<\[])\S+", r"\1" + MASK),
        # the start of a token cut at the end of the text (by a \r frame or a length cap): its known
        # prefix and a few characters, one of them a capital or a digit, are enough
        ("cut-token", _NB + r"(hf_|gh[pousr]_|github_pat_|" + _GITLAB + r"|wandb_v1_"
                      r"|(?:sk|rk)_(?:live|test)_|sk-|pypi-Ag|AIza|xox[abposr]-|eyJ|AKIA|ASIA)"
                      r"(?=[a-z_-]*[A-Z0-9])[A-Za-z0-9_-]{5,}(?= …\[cut\]\Z|\Z)", r"\1" + MASK),
    )
)
_BEGIN = re.compile(_KEY_BEGIN)
_END = re.compile(_KEY_END)
#: a line that is nothing but base64 of some length with mixed character classes: a key's body
_KEY_BODY = re.compile(r"^\s*(?=[A-Za-z0-9+/]*[0-9])(?=[A-Za-z0-9+/]*[a-z])(?=[A-Za-z0-9+/]*[A-Z])"
                       r"(?:[A-Za-z0-9+/]{40,}={0,2}|[A-Za-z0-9+/]{16,}={1,2})\s*$")


#: every literal of every shape
_ALL_WORDS = tuple(sorted({w for *_, words in _RULES for w in words}))
#: fewer, shorter literals, one of which is in each of ``_ALL_WORDS``: a string without any (nearly
#: every string of a report) is left as it is after half as many ``in`` tests
_COVER = ("-----", "://", "%3a%2f", "slack", "discord", "sig", "x-amz", "x-goog", "token", "secret", "key", "pass",
          "session", "hf_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github", "gl", "wandb", "_live_", "_test_",
          "whsec_", "sk-", "pypi-", "aiza", "akia", "asia", "agpa", "aida", "aroa", "anpa", "xox", "bearer", "authoriz",
          "eyj", "cookie", "login", "pwd", "credential")

#: what separates a secret from what a greedy value took with it (a path's next folder, an option)
_SEPARATORS = re.compile(r"[\s/\"',;:=@&?]+")
#: a piece of a secret worth looking for again once every shape has run: long, with a letter and a
#: digit, no dot (not a file name); shorter ones could be ordinary words of the same text
_LOOKS_GENERATED = re.compile(r"(?=[^\d]*\d)(?=[^A-Za-z]*[A-Za-z])[A-Za-z0-9+_!#$%^*~-]{8,}")
#: the piece of a token on either side of a \r that cuts it
_CUT_BEFORE = re.compile(r"[A-Za-z0-9_+/=-]{6,}\Z")
_CUT_AFTER = re.compile(r"[A-Za-z0-9_+/=-]{6,}")


def _substitute(text: str) -> str:
    low = text.lower()  # ``in`` over a lower-cased copy: far faster than a case-insensitive regex
    if not any(w in low for w in _COVER):
        return text
    found = [w for w in _ALL_WORDS if w in low]
    rules = [(re.compile(pattern), repl) for _name, pattern, repl, words in _RULES if not words.isdisjoint(found)]
    # what each shape would mask in the text as it came: a shape applied before it may have masked
    # the name that another secret is known by (password=a/--password b loses "--password")
    seen = {p for pattern, repl in rules for m in pattern.finditer(text) for p in _secret_pieces(m, repl)}
    original = text
    for pattern, repl in rules:
        text = pattern.sub(repl, text)
    for piece in sorted(seen, key=len, reverse=True):
        if piece in text:
            text = text.replace(piece, MASK)
    return text if text != original else original


def _secret_pieces(m: re.Match[str], repl: str) -> list[str]:
    """The pieces, between separators, of what replacement ``repl`` masks of match ``m`` (what comes
    after the prefix it keeps), that are long enough to be looked for once every shape has run."""
    out = m.expand(repl)
    kept = out[:out.find(MASK)]
    whole = m.group(0)
    secret = whole[len(kept):] if whole.startswith(kept) else whole
    if MASK in secret:
        return []
    return [p for p in _SEPARATORS.split(secret) if _LOOKS_GENERATED.fullmatch(p)]


@functools.lru_cache(maxsize=1 << 16)
def redact(text: str) -> str:
    """``text`` with every credential-shaped piece replaced by ``***``: also one that a ``\\r``
    progress frame cuts in two (the frames read as one text, then each on its own)."""
    if not text:
        return text
    if "\r" not in text:
        return _substitute(text)
    joined = _across_frames(text)[0]
    return "\r".join(_substitute(f) for f in joined.split("\r"))


@functools.lru_cache(maxsize=1 << 12)
def _across_frames(text: str) -> tuple[str, tuple[str, ...]]:
    """``text`` (frames separated by ``\\r``) with the secrets that only its frames read as one text
    show masked, and the pieces of those secrets that each frame holds (a frame reported on its own
    elsewhere holds one of them)."""
    joined = text.replace("\r", "")
    masked = _substitute(joined)
    if masked == joined:
        return text, ()
    where = [i for i, c in enumerate(text) if c != "\r"]  # position in text of each joined character
    out: list[str] = []
    pieces: list[str] = []
    done = 0  # text[:done] is written
    ops = difflib.SequenceMatcher(None, joined, masked, autojunk=False).get_opcodes()
    for op, i1, i2, j1, j2 in ops:
        if i1 == i2:  # an insertion: at the original position of joined[i1]
            start = end = where[i1] if i1 < len(where) else len(text)
        else:
            start, end = where[i1], where[i2 - 1] + 1
        out.append(text[done:start])  # the \r between two operations
        if op == "equal":
            out.append(text[start:end])
        else:
            out.append(masked[j1:j2])
            frames = text[start:end].split("\r")
            for k, frame in enumerate(frames):  # the pieces of a token that touch the \r cutting it
                before = _CUT_BEFORE.search(frame) if k < len(frames) - 1 else None
                after = _CUT_AFTER.match(frame) if k > 0 else None
                pieces += [m.group(0) for m in (before, after) if m is not None]
        done = end
    out.append(text[done:])
    return "".join(out), tuple(pieces)


class _Lines:
    """State along a sequence of log lines: inside a private key block whose lines come one by one."""

    __slots__ = ("in_key",)

    def __init__(self) -> None:
        self.in_key = False

    def line(self, text: str) -> str:
        if self.in_key:
            end = _END.search(text)
            if end is None:
                return MASK if text.strip() else text
            self.in_key = False
            head = text[:end.start()]
            text = (MASK if head.strip() else head) + text[end.start():]
        begins = list(_BEGIN.finditer(text))
        begin = begins[-1] if begins else None
        if begin is not None and _END.search(text, begin.end()) is None:
            self.in_key = True  # the block goes on in the next lines
        if _KEY_BODY.match(text):
            return MASK
        return redact(text)


#: dataclass fields that hold a log line (and so may continue a key block begun in the line before)
_LINE_FIELDS = frozenset({"text", "context"})


#: scalars no secret hides in (checked by type first: a 4096-rank report has ~200,000 values)
_PLAIN = (int, float, bool, type(None))

#: what a walk does to one string (the state along the sequence it is in, when it is a log line)
_Mask = Callable[[str, "_Lines | None"], str]


def _walk(value: Any, mask: _Mask, lines: _Lines | None = None) -> Any:
    """``value`` with ``mask`` applied to every string; containers and dataclasses in which nothing
    changed are returned as they are (no copy)."""
    cls = type(value)
    if cls is str or isinstance(value, str):  # a subclass too (a typed note): masked like any text
        masked = mask(value, lines)
        # the cache of ``redact`` answers with the first equal string it saw: the value itself when
        # nothing was masked, so that the dataclass holding it is not copied for nothing
        return value if masked == value else masked
    if cls in _PLAIN or isinstance(value, Enum):
        return value
    if cls is tuple or cls is list:
        seq = _Lines()  # one state along the sequence: evidence lines, timeline events, context lines
        out = [_walk(v, mask, seq) for v in value]
        if all(a is b for a, b in zip(out, value)):
            return value
        return tuple(out) if cls is tuple else out
    if cls is dict:
        new = {k: _walk(v, mask) for k, v in value.items()}
        return value if all(new[k] is v for k, v in value.items()) else new
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for name in field_names(cls):
            v = getattr(value, name)
            w = _walk(v, mask, lines if name in _LINE_FIELDS else None)
            if w is not v:
                changes[name] = w
        return dataclasses.replace(value, **changes) if changes else value
    if isinstance(value, (tuple, list)):  # a subclass (a named tuple): rebuilt as before
        seq = _Lines()
        out = [_walk(v, mask, seq) for v in value]
        return type(value)(out) if isinstance(value, list) else tuple(out)
    if isinstance(value, dict):
        return {k: _walk(v, mask) for k, v in value.items()}
    return value


def map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    """``value`` (a Report, or any part of one) with ``fn`` applied to every string, walked as
    ``redact_report`` walks it; what ``fn`` leaves alone is not copied."""
    return _walk(value, lambda text, _lines: fn(text))


def redact_report(report: Any) -> Any:
    """A copy of the report with secrets masked in every string (log text, paths, diagnostics).

    A line whose ``\\r`` frames cut a secret in two is kept whole only where it is context; where it
    is an event, the report holds the one frame with the error, and with it a piece of the secret
    that has no recognisable shape left. So the pieces found in the whole lines are masked wherever
    else they appear, in a second walk (only when there are any)."""
    pieces: set[str] = set()

    def first(text: str, lines: _Lines | None) -> str:
        out = lines.line(text) if lines is not None else redact(text)
        if "\r" in text:
            pieces.update(_across_frames(text)[1])
        return out

    masked = _walk(report, first)
    if not pieces:
        return masked
    ordered = sorted(pieces, key=len, reverse=True)

    def second(text: str, _lines: _Lines | None) -> str:
        for piece in ordered:
            if piece in text:
                text = text.replace(piece, MASK)
        return text

    return _walk(masked, second)
