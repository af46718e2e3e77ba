"""Secrets never leave the machine: redact them in environments, logs, reports and bundles.

Two nets, because either alone misses things: values of variables whose *names* say secret
(and those values wherever they appear later, e.g. printed by a stage), and well-known secret
*shapes* in any text. A match is replaced by a marker; the line around it is kept.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

MARKER = "[REDACTED]"

SECRET_NAME = re.compile(
    r"(?i)(token|secret|passw(or)?d|passwd|credential|api[_-]?key|access[_-]?key|"
    r"private[_-]?key|auth|session|cookie|signature|connection[_-]?string|webhook|"
    r"(^|[_-])key($|[_-]))"
)
_SHAPES = [
    re.compile(p, flags)
    for p, flags in [
        (r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S),
        (r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b", 0),  # AWS access key ids
        (r"\bgh[pousr]_[A-Za-z0-9]{20,}\b", 0),  # GitHub tokens
        (r"\bgithub_pat_[A-Za-z0-9_]{20,}\b", 0),
        (r"\bglpat-[A-Za-z0-9_-]{20,}\b", 0),  # GitLab
        (r"\bhf_[A-Za-z0-9]{20,}\b", 0),  # Hugging Face
        (r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b", 0),  # Slack
        (r"\bAIza[0-9A-Za-z_-]{35}\b", 0),  # Google API keys
        (r"\bya29\.[0-9A-Za-z_-]{20,}\b", 0),  # Google OAuth access tokens
        (r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}\b", 0),  # OpenAI / Anthropic style keys
        (r"\bnpm_[A-Za-z0-9]{30,}\b", 0),
        (r"\bpypi-[A-Za-z0-9_-]{30,}\b", 0),
        (r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b", 0),  # JWTs
        (r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}\b", 0),  # Stripe secret and restricted keys
        (r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}\b", 0),  # SendGrid
        (r"\bdo[opr]_v1_[a-f0-9]{64}\b", 0),  # DigitalOcean
        (r"(?<=hooks\.slack\.com/)(?:services|workflows|triggers)/[A-Za-z0-9/_-]+", 0),
    ]
]
# Keep the name, hide the value: `Authorization: Bearer x`, `password=x`, `"api_key": "x"`.
# Prose has these words too ("basic operations", "token embeddings", "LastTokenEmbedding: every
# operation", a captured model's title): after "basic" or "token", and after a name that has a
# secret word only inside a longer word (author, tokenizer, secretKey), a value is hidden only
# where it looks made (_made); after a name that ends in the word, or has it before a
# separator (password, GITHUB_TOKEN, api_key_id), whatever it is.
# (a tokenizer, tokenization and a count of tokens, max_tokens=2048, are no secrets: the word
# before "iz"/"is" is none, and a plural's value made of digits alone is kept)
_WORDS = (r"token(?!i[sz])|secret|passw(?:or)?d|passwd|credential|api[_-]?key|access[_-]?key|"
          r"private[_-]?key|auth")  # fmt: skip
_COUNT = re.compile(r"(?i)tokens(?:[_.-]|$)")
_BEARER = re.compile(r"(?i)\b(bearer|basic|token)(\s+)([A-Za-z0-9\-._~+/]{8,}=*)")
_ASSIGNMENT = re.compile(
    rf"(?i)\b([\w.-]*(?:{_WORDS})[\w.-]*)(\"?'?\s*[:=]\s*\"?'?)([^\s\"',;]{{4,}})"
)
_WHOLE_WORD = re.compile(rf"(?i)(?:{_WORDS})s?(?:[_.-]|$)")
# Azure: `AccountKey=...;` in connection strings, `&sig=...` in SAS URLs (name kept).
_AZURE = re.compile(r"(?i)(\b(?:AccountKey|SharedAccessKey)=|[?&]sig=)([^\s;&\"']{8,})")
_URL_PASSWORD = re.compile(r"(?<=://)([^/\s:@]+):([^/\s@]+)@")


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of secret-named variables, longest first, so that they are found anywhere."""
    environ = os.environ if environ is None else environ
    values = {v for k, v in environ.items() if is_secret_name(k) and len(v) >= 4}
    return sorted(values, key=len, reverse=True)


def redact_env(environ: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``environ`` with secret-named variables' values and secret shapes hidden."""
    known = secret_values(environ)
    return {k: MARKER if is_secret_name(k) else redact_text(v, known) for k, v in environ.items()}


def redact_text(text: str, known: Iterable[str] | None = None) -> str:
    """``text`` with every known secret value and every secret shape replaced by the marker."""
    for value in secret_values() if known is None else known:
        text = text.replace(value, MARKER)
    for shape in _SHAPES:
        text = shape.sub(MARKER, text)
    text = _BEARER.sub(_bearer, text)
    text = _ASSIGNMENT.sub(_assignment, text)
    text = _AZURE.sub(lambda m: f"{m[1]}{MARKER}", text)
    return _URL_PASSWORD.sub(lambda m: f"{m[1]}:{MARKER}@", text)


def _bearer(match: re.Match[str]) -> str:
    scheme, space, value = match.groups()
    if scheme.lower() != "bearer" and not _made(value):
        return match[0]
    return f"{scheme}{space}{MARKER}"


def _assignment(match: re.Match[str]) -> str:
    name, equals, value = match.groups()
    if not _WHOLE_WORD.search(name) and not _made(value):
        return match[0]
    if value.isdigit() and _COUNT.search(name):
        return match[0]
    return f"{name}{equals}{MARKER}"


def _made(value: str) -> bool:
    """Whether a value looks generated (a key, a hash, base64) rather than written: a digit,
    a symbol, or a capital letter after its first."""
    return any(c.isdigit() or c in "-._~+/=" for c in value) or any(c.isupper() for c in value[1:])


def redact_file(path: Path, known: Iterable[str] | None = None) -> None:
    """Rewrite a text file (a log, a script) redacted, in place; binary bytes pass through.

    A file that is gone is nothing to redact: a stage may delete its own folder, logs and all.
    """
    try:
        text = path.read_bytes().decode("utf-8", errors="surrogateescape")
    except FileNotFoundError:
        return
    clean = redact_text(text, known)
    if clean != text:
        path.write_bytes(clean.encode("utf-8", errors="surrogateescape"))
