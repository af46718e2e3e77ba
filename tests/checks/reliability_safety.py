"""Untrusted artifacts (code-running pickles, damaged files, links in a run folder) and secrets.

reprokit writes bundles but has no bundle reader yet: so instead of a hostile zip, the check
plants links (to a file and to a folder outside) and odd names in a run folder, and looks at the
bundle `reprokit report` writes: no member may come through a link, name ``..`` or be absolute.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import zipfile
from pathlib import Path

from reliability_common import (
    FAULT_TEMPLATES,
    Figure,
    case_file,
    files_under,
    info,
    reprokit,
    zero,
)
from typer.testing import CliRunner

from reprokit.cli import app


class Evil:
    """Unpickled by a trusting loader, it creates ``marker``: a stranger's code running."""

    def __init__(self, marker: Path, how: str = "open") -> None:
        self.marker, self.how = str(marker), how

    def __reduce__(self):
        if self.how == "exec":
            return (exec, (f"open({self.marker!r}, 'w')",))
        if self.how == "system":
            return (os.system, (f"touch {self.marker}",))
        return (open, (self.marker, "w"))


def _artifacts(folder: Path, marker: Path) -> dict[str, Path]:
    """One good torch.save file, and the hostile ones, by what is wrong with them."""
    import torch

    good = folder / "good.pt"
    torch.save({"weight": torch.ones(3)}, good)
    made: dict[str, Path] = {}
    for how in ("open", "exec", "system"):
        path = made[f"torch.save pickle ({how})"] = folder / f"evil-{how}.pt"
        torch.save({"weight": torch.ones(3), "payload": Evil(marker, how)}, path)
        xser = made[f"xser main file ({how})"] = folder / f"evil-{how}.xser"
        shutil.copy(path, xser)
        (folder / f"evil-{how}.xser.tensors").mkdir()
        step = folder / f"dcp-{how}/step"
        step.mkdir(parents=True)
        (step / ".metadata").write_bytes(pickle.dumps(Evil(marker, how)))
        made[f"dcp .metadata ({how})"] = step
    legacy = made["legacy torch.save pickle"] = folder / "legacy.pt"
    torch.save({"payload": Evil(marker)}, legacy, _use_new_zipfile_serialization=False)
    made["raw pickle as .pt"] = folder / "raw.pt"
    made["raw pickle as .pt"].write_bytes(pickle.dumps(Evil(marker)))
    data = good.read_bytes()
    for cut in (1, 10, 100, len(data) // 2, len(data) - 30, len(data) - 1):
        made[f"truncated at {cut}"] = folder / f"cut{cut}.pt"
        made[f"truncated at {cut}"].write_bytes(data[:cut])
    made["garbage"] = folder / "garbage.pt"
    made["garbage"].write_bytes(os.urandom(4096))
    made["empty"] = folder / "empty.pt"
    made["empty"].write_bytes(b"")
    made["safetensors with a lying header"] = folder / "bad.safetensors"
    made["safetensors with a lying header"].write_bytes(b"\xff" * 8 + b"{}")
    return made | {"good": good}


def artifacts(folder: Path, garbage: int = 0) -> list[Figure]:
    """Hostile artifacts through `reprokit diff` (in process), ``garbage`` random files among
    them (about 6 in 100 start with a pickle opcode that pops an empty stack); a run folder
    with links."""
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / "pwned"
    made = _artifacts(folder, marker)
    good = made.pop("good")
    for n in range(garbage):
        made[f"random bytes {n}"] = folder / f"random{n}.pt"
        made[f"random bytes {n}"].write_bytes(os.urandom(4096))
    runner = CliRunner()
    tried = refused = tracebacks = 0
    before = files_under(folder)
    for path in made.values():
        for pair in ((good, path), (path, good)):
            result = runner.invoke(app, ["diff", *map(str, pair)])
            tried += 1
            refused += result.exit_code == 2
            crashed = result.exception and not isinstance(result.exception, SystemExit)
            tracebacks += bool(crashed) or "Traceback" in result.output
    written = files_under(folder) - before
    figures = [
        info("untrusted artifacts tried (diff, both sides)", tried),
        Figure("  refused with exit 2", refused, f"{tried}", refused == tried),
        zero("  uncaught exceptions (exit 1, no message)", tracebacks),
        zero("  executed (marker created)", int(marker.exists())),
        zero("  files written", len(written)),
    ]
    return figures + _bundle_links(folder / "links")


def _bundle_links(folder: Path) -> list[Figure]:
    """A run folder holding links out of it: the bundle must store neither them nor ``..``."""
    outside = folder / "outside"
    outside.mkdir(parents=True)
    (outside / "secret.txt").write_text("OUTSIDE-THE-RUN-FOLDER\n")
    run_dir = folder / "run"
    (run_dir / "v/stages/s").mkdir(parents=True)
    summary = {"run": {"started": "x", "finished": None, "argv": [], "env": {}}, "variants": []}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    (run_dir / "v/stages/s/stdout.log").symlink_to(outside / "secret.txt")
    (run_dir / "v/stages/s/linked").symlink_to(outside, target_is_directory=True)
    (run_dir / "v/escape.txt").symlink_to("../../outside/secret.txt")
    (run_dir / "v/stages/s/..odd.log").write_text("dots in a name, not a path\n")
    code = reprokit("report", run_dir, "--format", "md").returncode
    bad = leaked = 0
    with zipfile.ZipFile(run_dir / "bundle.zip") as bundle:
        for member in bundle.infolist():
            parts = member.filename.split("/")
            is_link = (member.external_attr >> 16) & 0o170000 == 0o120000
            bad += member.filename.startswith("/") or ".." in parts or is_link
            leaked += b"OUTSIDE-THE-RUN-FOLDER" in bundle.read(member)
    return [
        Figure("bundle of a run folder with links: report exit", code, "0", code == 0),
        zero("  bundle members absolute, .. or links", bad),
        zero("  bundle members holding a linked file", leaked),
    ]


# (variable, value, the part that must never be seen). Names that do not say "secret"
# (DATABASE_URL, SLACK_WEBHOOK_URL, ...) are found by the value's shape alone.
B64 = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
CORPUS = [
    ("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLQ", None),
    ("AWS_SECRET_ACCESS_KEY", B64, None),
    ("AWS_SESSION_TOKEN", "FwoGZXIvYXdzEJr" + "Q" * 40, None),
    ("GOOGLE_API_KEY", "AIzaSyA" + "b1C2d3E4f5" * 3 + "xy", None),
    ("GOOGLE_OAUTH_ACCESS_TOKEN", "ya29.a0AfH6SMC" + "x7Y8z9" * 5, None),
    ("GCP_SA_PRIVATE_KEY_ID", "4b3f1c0e9d8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c", None),
    ("AZURE_CLIENT_SECRET", "Qx8Q~abcDEFghiJKLmnoPQRstuVWXyz0123456789", None),
    (
        "AZURE_STORAGE_CONNECTION_STRING",
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey="
        + "Zm9vYmFyYmF6cXV4" * 5
        + "==;EndpointSuffix=core.windows.net",
        "Zm9vYmFyYmF6cXV4Zm9vYmFy",
    ),
    (
        "AZURE_SAS_URL",
        "https://acct.blob.core.windows.net/c?sv=2022-11-02&sig="
        + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8s9T0%3D",
        "a1B2c3D4e5F6g7H8i9J0k1L2",
    ),
    ("GITHUB_TOKEN", "ghp_" + "a1B2c3D4e5" * 3 + "F6g7H8", None),
    ("GH_FINE_GRAINED", "github_pat_11ABCDEFG0" + "x1Y2z3" * 10, None),
    ("GITLAB_TOKEN", "glpat-" + "Ab3De6Gh9Jk2Mn5Pq8St", None),
    ("CI_JOB_JWT", "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJwcm9qZWN0In0.c2lnbmF0dXJlc2lnbmF0dXJl", None),
    ("HF_TOKEN", "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz12345678", None),
    ("HUGGING_FACE_HUB_TOKEN", "hf_" + "ZyXwVuTsRqPoNmLkJiHgFeDcBa98765432", None),
    ("SLACK_BOT_TOKEN", "xoxb-1234567890123-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", None),
    (
        "SLACK_WEBHOOK_URL",
        "https://hooks.slack.com/services/T0AAAAAAA/B0BBBBBBB/" + "Xy" * 12,
        "XyXyXyXyXyXyXyXyXyXyXyXy",
    ),
    ("STRIPE_SECRET_KEY", "sk_live_" + "51H8xYz" * 4, None),
    ("STRIPE_RESTRICTED", "rk_live_" + "51J9aBc" * 4, None),
    ("OPENAI_API_KEY", "sk-proj-" + "Ab1Cd2Ef3Gh4" * 4, None),
    ("ANTHROPIC_API_KEY", "sk-ant-api03-" + "Zz9Yy8Xx7Ww6" * 4, None),
    ("NPM_TOKEN", "npm_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8", None),
    ("PYPI_API_TOKEN", "pypi-AgEIcHlwaS5vcmcCJGQ" + "x9Z8y7" * 6, None),
    ("SENDGRID_API_KEY", "SG." + "a" * 22 + "." + "B" * 43, None),
    ("DIGITALOCEAN_ACCESS_TOKEN", "dop_v1_" + "0123456789abcdef" * 4, None),
    (
        "SSH_PRIVATE_KEY",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
        "-----END OPENSSH PRIVATE KEY-----",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ",
    ),
    (
        "TLS_KEY_PEM",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq98hUMl\n-----END RSA PRIVATE KEY-----",
        "MIIEowIBAAKCAQEA7bq98hUMl",
    ),
    ("HTTP_HEADERS", "Authorization: Bearer abcDEF123ghiJKL456mno", "abcDEF123ghiJKL456mno"),
    ("PROXY_HEADER", "Proxy-Authorization: Basic dXNlcjpodW50ZXIyMjI=", "dXNlcjpodW50ZXIyMjI="),
    ("DATABASE_URL", "postgres://admin:Sup3rS3cretPw@db.example.com:5432/app", "Sup3rS3cretPw"),
    ("PIP_INDEX_URL", "https://__token__:pyp1Pr1vat3Idx@pypi.example.com/simple", "pyp1Pr1vat3Idx"),
    ("DB_PASSWORD", "hunter2hunter2", None),
    ("MYSQL_ROOT_PASSWORD", "r00tPassw0rd!", None),
    ("PGPASSWORD", "pgS3cret99", None),
    ("REDIS_PASSWD", "redisPa55", None),
    ("WANDB_API_KEY", "0123456789abcdef0123456789abcdef01234567", None),
    ("KAGGLE_KEY", "f0e1d2c3b4a5968778695a4b3c2d1e0f", None),
    ("TWILIO_AUTH_TOKEN", "9f8e7d6c5b4a39281706f5e4d3c2b1a0", None),
    ("DISCORD_BOT_TOKEN", "MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FMQ.ZnCjm1XVW7vRze4b7Cq4se7kKWs", None),
    ("SESSION_SECRET", "keyboard-cat-session-s3cret", None),
    ("MY_APP_API_KEY", "myapp-5f4dcc3b5aa765d61d8327deb882cf99", None),
    ("XLA_AUTH_SECRET", "xla-secret-value-1234", None),
]


def needle(entry: tuple[str, str, str | None]) -> str:
    return entry[2] or entry[1]


def _texts(run_dir: Path, env_json: str) -> dict[str, bytes]:
    """Every output to search, by where it was found."""
    found: dict[str, bytes] = {"reprokit env --json": env_json.encode()} if env_json else {}
    for path in sorted(run_dir.rglob("*")):
        if path.is_file() and path.name != "bundle.zip":
            found[str(path.relative_to(run_dir))] = path.read_bytes()
    with zipfile.ZipFile(run_dir / "bundle.zip") as bundle:
        for name in bundle.namelist():
            found[f"bundle.zip:{name}"] = bundle.read(name)
    return found


def secret_leaks(run_dir: Path, env_json: str) -> dict[str, list[str]]:
    """Where each secret of the corpus was found, in plain text: {place: [variables]}."""
    leaks: dict[str, list[str]] = {}
    for place, data in _texts(run_dir, env_json).items():
        for entry in CORPUS:
            if needle(entry).encode() in data:
                leaks.setdefault(place, []).append(entry[0])
    return leaks


def secrets(folder: Path) -> list[Figure]:
    """The corpus in the environment of a run whose stage prints it; then every output."""
    env = dict(os.environ) | {name: value for name, value, _ in CORPUS}
    names = json.dumps([name for name, _, _ in CORPUS])
    text = '[case]\ntitle = "secrets"\ntemplate = "faults"\n'
    text += f'[params]\nmode = "secrets"\nsecrets = {names}\n'
    case = case_file(folder, "secrets", text)
    run_dir = folder / "run"
    ran = reprokit("run", case, "--templates", FAULT_TEMPLATES, "-o", run_dir, env=env)
    reported = reprokit("report", run_dir, env=env)
    later = reprokit("report", run_dir, "-o", folder / "later")  # a shell without the variables
    env_json = reprokit("env", "--json", env=env).stdout.decode()
    leaks = secret_leaks(run_dir, env_json)
    ours = {p: v for p, v in leaks.items() if "stages/" not in p or p.startswith("bundle.zip:")}
    logs = {p: v for p, v in leaks.items() if p not in ours}
    stdout = ran.stdout + ran.stderr + reported.stdout + reported.stderr
    console = [n for n, v, s in CORPUS if (s or v).encode() in stdout]
    shapes = sorted({name for names in logs.values() for name in names})
    later_leaks = secret_leaks(folder / "later", "") if later.returncode == 0 else {"": ["?"]}
    figures = [
        info("secret shapes and names in the corpus", len(CORPUS)),
        Figure("secrets run exit", ran.returncode, "0", ran.returncode == 0),
        zero("leaked into report.md/html/json, bundle, summary, env", _count(ours)),
        zero("leaked to the console of run/report", len(console)),
        zero("leaked into the run folder's stage logs", _count(logs)),
        zero("leaked into reports written later (no env)", _count(later_leaks)),
    ]
    for place, found in sorted(ours.items()):
        figures.append(Figure(f"  leak in {place}", ",".join(found), "", False))
    for place, found in sorted(later_leaks.items()):
        figures.append(Figure(f"  later: leak in {place}", ",".join(found), "", False))
    if shapes:
        figures.append(
            Figure(f"  stage logs hold, in plain text: {len(shapes)} secrets", "", "", False)
        )
    return figures


def _count(leaks: dict[str, list[str]]) -> int:
    return sum(len(v) for v in leaks.values())
