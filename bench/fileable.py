"""Fileability on models nobody here wrote: each public architecture of the corpus captured,
run and reported as a user would (``reprokit capture``, ``reprokit run``, ``reprokit report``,
no minimize), in float32, bfloat16 and float16, forward, and a training step for eleven of
them; then every report sorted by what a maintainer would get from it:

- ``filed``: report.md claims a bug and its first python block, written alone into an empty
  folder and run there under ``env -i PATH=/usr/bin:/bin HOME=/tmp PJRT_DEVICE=CPU python -I``,
  exits 1 in at most 30 lines;
- ``known``: it says the bug is known (``Known: ...``), with or without a repro;
- ``rounding``: it says there is nothing to file (every difference is the dtype's rounding);
- ``no repro``: it says plainly that no standalone repro was found, and why;
- ``match``: the run agreed (exit 0); ``refused``: the capture refused the model in one line;
- ``own failure``: it reports a failure that is not torch_xla's as such (reprokit's own, or
  torch's CPU lacking the dtype's kernel: no reference to compare with);
- the failures of the tool: ``headline, no repro`` (a bug title with no python block, or a
  harness named as the repro), ``repro not 1`` (its repro exits otherwise alone, or is longer
  than 30 lines: the exit code says which) and ``error`` (the run ended in error or crash and
  the report files it as XLA's: each is named, to be read by hand).

The corpus is split by a rule nobody picks (the first hex digit of the SHA-256 of the model's
name below 6: about a third held out) into the part the tool may be tuned on and the held-out
part; the table gives both.

    python bench/fileable.py -o DIR [--only NAME,NAME] [--dtypes float32,bfloat16,float16]
                             [-j 2] [--checkout DIR] [--report-only] [--list]

``--checkout`` runs another checkout's reprokit (``git worktree add /tmp/before REV``): before
and after on one machine. ``--sort-only`` sorts DIR's reports again, running nothing.
``--report-only`` keeps DIR's captures and runs and reports them again (with the checkout's or
today's code), re-running only the variants that ended in error or crash. DIR keeps captures
between calls: a capture already there is not made again. On two
cores the whole corpus is about an hour.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FACTORIES = Path(__file__).resolve().parent / "fileable_models.py"
OWN = Path(__file__).resolve().parent / "fileable_own.py"
PYTHON = sys.executable
ENV_ALONE = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PJRT_DEVICE": "CPU"}
DTYPES = ("float32", "bfloat16", "float16")
MAX_LINES = 30
IMAGE = "1,3,64,64"

# name, reprokit capture's arguments (a zoo name or a factory, its configuration and shape)
CORPUS: list[tuple[str, list[str]]] = [
    *[
        (m, [f"torchvision:{m}"])
        for m in (
            "resnet18",
            "mobilenet_v2",
            "mobilenet_v3_small",
            "squeezenet1_1",
            "shufflenet_v2_x0_5",
            "efficientnet_b0",
            "mnasnet0_5",
            "regnet_x_400mf",
            "convnext_tiny",
            "swin_t",
            "densenet121",
        )
    ],
    (
        "googlenet",
        ["torchvision:googlenet", "--config", "aux_logits=false", "--config", "init_weights=true"],
    ),
    ("vit_b_16", ["torchvision:vit_b_16", "--config", "image_size=64"]),
    ("fasterrcnn", ["torchvision:fasterrcnn_mobilenet_v3_large_320_fpn"]),  # a detection head
    *[
        (m, [f"timm:{m}"])
        for m in (
            "convnext_atto",
            "test_efficientnet",
            "test_resnet",
            "test_byobnet",
            "test_coatnet",
            "test_convnext2",
            "test_nfnet",
            "test_efficientnet_gn",
            "test_mambaout",
        )
    ],
    ("test_vit", ["timm:test_vit", "--shape", "1,3,160,160"]),
    ("test_vit_relpos", ["timm:test_vit_relpos", "--shape", "1,3,160,160"]),
    *[
        (m.split(":")[1].lower(), [m])
        for m in (
            "hf:LlamaForCausalLM",
            "hf:MistralForCausalLM",
            "hf:Qwen2ForCausalLM",
            "hf:OPTForCausalLM",
            "hf:gpt2",
            "hf:bert",
            "hf:t5",
            "hf:bart",
            "hf:vit",
            "hf:deberta-v2",
            "hf:gemma",
            "hf:phi",
            "hf:gpt_neox",
            "hf:roberta",
            "hf:swin",
            "hf:convnext",
        )
    ],
    ("unet", [f"{FACTORIES}:unet"]),  # a diffusion UNet (diffusers)
    *[
        (f"train_{m}", [f"{FACTORIES}:train_{m}", "--train"])
        for m in (
            "resnet18",
            "mobilenet_v3_small",
            "efficientnet_b0",
            "swin_t",
            "convnext_atto",
            "test_vit",
            "test_byobnet",
            "gpt2",
            "llama",
            "bert",
            "qwen2",
        )
    ],
]

# --own: five models written here as a new user writes theirs (bench/fileable_own.py), each
# captured and run in bfloat16 and in float16: ten reports read by hand
OWN_DTYPE = {f"{m}_{d}": d for m in ("rope", "convnet", "train_text", "pool_head", "causal")
             for d in ("bfloat16", "float16")}  # fmt: skip
OWN_MODELS = [(m, [f"{OWN}:{m}"] + (["--train"] if m.startswith("train") else []))
              for m in OWN_DTYPE]  # fmt: skip

SORTS = ("filed", "known", "rounding", "no repro", "match", "refused", "own failure",
         "headline, no repro", "repro not 1", "error")  # fmt: skip
BAD = SORTS[-3:]


def part(name: str) -> str:
    if name in dict(OWN_MODELS):
        return "own"
    return "held out" if held_out(name) else "tuning"


def held_out(name: str) -> bool:
    return hashlib.sha256(name.encode()).hexdigest()[0] in "012345"


@dataclass
class Row:
    model: str
    dtype: str
    part: str
    sort: str
    title: str = ""
    why: str = ""  # the exit code alone, the lines, the error's reason
    seconds: float = 0.0


def _reprokit(args: list[str], env: dict[str, str], log: Path, timeout: int = 1800) -> int:
    with log.open("w") as out:
        try:
            return subprocess.run([PYTHON, "-m", "reprokit", *args], stdout=out, env=env,
                                  stderr=subprocess.STDOUT, timeout=timeout, check=False,
                                  cwd=env.get("PYTHONPATH") or None).returncode  # fmt: skip
        except subprocess.TimeoutExpired:
            return -9


def capture(name: str, args: list[str], out: Path, env: dict[str, str]) -> Path | str:
    """The case file (made once), or why the capture refused the model."""
    case = out / "captured" / f"{name}.toml"
    if case.is_file():
        return case
    log = out / "logs" / f"capture-{name}.log"
    code = _reprokit(["capture", *args, "--name", name, "-o", str(case.parent)], env, log)
    if code == 0 and case.is_file():
        return case
    said = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return next((line for line in said if line.startswith("error:")), said[-1] if said else "")


def variant(name: str, case: Path, dtype: str, out: Path, env: dict[str, str],
            report_only: bool) -> Row:  # fmt: skip
    """Run (unless kept) and report one model in one dtype, then sort its report."""
    start, folder = time.perf_counter(), out / "runs" / f"{name}-{dtype}"
    ran = _kept(folder) if report_only else None
    if ran is None:
        subprocess.run(["rm", "-rf", str(folder)], check=False)
        ran = _reprokit(["run", str(case), "-o", str(folder), "--set", f"dtype={dtype}"], env,
                        out / "logs" / f"run-{name}-{dtype}.log")  # fmt: skip
    _reprokit(["report", str(folder)], env, out / "logs" / f"report-{name}-{dtype}.log")
    row = sort(folder, ran)
    row.model, row.dtype, row.part = name, dtype, part(name)
    row.seconds = round(time.perf_counter() - start, 1)
    return row


def _kept(folder: Path) -> int | None:
    """A kept run's exit code (0 match, 1 otherwise), or None to run it again: none there, or
    it ended in error or crash (what a fix of reprokit's own failures changes)."""
    try:
        variants = json.loads((folder / "summary.json").read_text())["variants"]
    except (OSError, ValueError, KeyError):
        return None
    if any(v["outcome"] in ("error", "crash") for v in variants):
        return None
    return 0 if all(v["outcome"] == "match" for v in variants) else 1


# report.md's titles when it files nothing (reprokit/reports/unfiled.py)
TITLES = (("Known: ", "known"), ("Nothing to file", "rounding"),
          ("No standalone repro", "no repro"), ("reprokit's own failure", "own failure"),
          ("No CPU reference", "own failure"))  # fmt: skip
_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def sort(folder: Path, ran: int) -> Row:
    """What a maintainer gets from the report (the module's docstring)."""
    row = Row("", "", "", "match")
    if ran == 0:
        return row
    try:
        text = (folder / "report.md").read_text()
    except OSError:
        return Row("", "", "", "error", why="no report.md")
    row.title = text.splitlines()[0].removeprefix("# ")[:160]
    said = next((s for prefix, s in TITLES if row.title.startswith(prefix)), None)
    if said is not None:
        row.sort = said
    elif _outcome(folder) in ("error", "crash"):  # a failure reported as XLA's bug
        row.sort, row.why = "error", _reason(folder)
    elif (block := _BLOCK.search(text)) is None:
        row.sort = "headline, no repro"
    else:
        code, lines = alone(block.group(1))
        row.why = f"exit {code}, {lines} lines"
        shows = code == 1 and lines <= MAX_LINES
        row.sort = ("known" if "Known: " in text else "filed") if shows else "repro not 1"
    return row


def _outcome(folder: Path) -> str:
    variants = json.loads((folder / "summary.json").read_text())["variants"]
    return variants[0]["outcome"]


def _reason(folder: Path) -> str:
    variants = json.loads((folder / "summary.json").read_text())["variants"]
    return (variants[0].get("reason") or "")[:200]


def alone(script: str) -> tuple[int, int]:
    """The repro's exit code alone in an empty folder under a bare environment, and its
    lines."""
    with tempfile.TemporaryDirectory() as empty:
        Path(empty, "repro.py").write_text(script)
        try:
            done = subprocess.run(["env", "-i", *(f"{k}={v}" for k, v in ENV_ALONE.items()),
                                   PYTHON, "-I", "repro.py"], cwd=empty, capture_output=True,
                                  timeout=600, check=False)  # fmt: skip
            code = done.returncode
        except subprocess.TimeoutExpired:
            code = -9
    return code, len(script.strip().splitlines())


def table(rows: list[Row]) -> str:
    """Counts per sort, for the tuning part, the held-out part and both."""
    parts = {p: [r for r in rows if r.part == p] for p in ("tuning", "held out", "own")
             if any(r.part == p for r in rows)}  # fmt: skip
    parts["all"] = rows
    head = f"| sort | {' | '.join(parts)} |\n| --- |{' ---: |' * len(parts)}"
    counts = {p: Counter(r.sort for r in found) for p, found in parts.items()}
    lines = [f"| {s} | {' | '.join(str(counts[p][s]) for p in parts)} |" for s in SORTS]
    headlines = ("filed", "repro not 1", "headline, no repro", "error")  # a new bug claimed
    claims = {p: sum(counts[p][s] for s in headlines) for p in parts}
    shown = " | ".join(f"{counts[p]['filed']} of {claims[p]}" for p in parts)
    lines.append(f"| bug headlines with a repro that exits 1 alone | {shown} |")
    return "\n".join([head, *lines])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", type=Path, required=True, help="captures, runs, logs, results")
    parser.add_argument("--only", default="", help="model names, comma-separated")
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("-j", type=int, default=2, help="variants at once")
    parser.add_argument("--checkout", type=Path, help="another checkout's reprokit")
    parser.add_argument("--report-only", action="store_true", help="report DIR's runs again")
    parser.add_argument(
        "--sort-only",
        action="store_true",
        help="sort DIR's reports again (fileable.json's rows), running nothing",
    )
    parser.add_argument("--own", action="store_true", help="the five models of fileable_own.py")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    args.o = args.o.resolve()
    only = set(filter(None, args.only.split(",")))
    corpus = [(n, a) for n, a in (OWN_MODELS if args.own else CORPUS) if not only or n in only]
    if args.list:
        print("\n".join(f"{n:<22} {part(n)}" for n, _ in corpus))
        return
    env = dict(os.environ, PYTHONPATH=str(args.checkout.resolve())) if args.checkout \
        else dict(os.environ)  # fmt: skip
    for sub in ("captured", "runs", "logs"):
        (args.o / sub).mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    rows = resorted(args.o) if args.sort_only else run_corpus(corpus, args, env)
    (args.o / "fileable.json").write_text(json.dumps([asdict(r) for r in rows], indent=1))
    print(f"\n{len(rows)} reports in {time.perf_counter() - start:.0f} s\n\n{table(rows)}\n")
    for row in rows:
        if row.sort in BAD or row.sort in ("no repro", "own failure"):
            print(f"- {row.model} {row.dtype} ({row.part}): {row.sort}: {row.title} {row.why}")


def resorted(out: Path) -> list[Row]:
    """fileable.json's rows sorted again from their reports (refusals kept as they were)."""
    rows = []
    for kept in json.loads((out / "fileable.json").read_text()):
        row = Row(**kept)
        if row.sort != "refused":
            folder = out / "runs" / f"{row.model}-{row.dtype}"
            again = sort(folder, 0 if _kept(folder) == 0 else 1)
            row.sort, row.title, row.why = again.sort, again.title, again.why
        rows.append(row)
    return rows


def run_corpus(corpus: list[tuple[str, list[str]]], args: argparse.Namespace,
               env: dict[str, str]) -> list[Row]:  # fmt: skip
    """Captures, then every variant, ``-j`` at a time; each row printed as it ends."""
    with ThreadPoolExecutor(args.j) as pool:
        cases = dict(zip([n for n, _ in corpus], pool.map(
            lambda named: capture(*named, args.o, env), corpus), strict=True))  # fmt: skip
        rows = [Row(n, "-", part(n), "refused", why=str(c)[:200])
                for n, c in cases.items() if not isinstance(c, Path)]  # fmt: skip
        dtypes = args.dtypes.split(",")
        jobs = [(n, c, d) for n, c in cases.items() if isinstance(c, Path)
                for d in ([OWN_DTYPE[n]] if n in OWN_DTYPE else dtypes)]  # fmt: skip
        for row in pool.map(lambda job: variant(*job, args.o, env, args.report_only), jobs):
            print(
                f"{row.model:<24} {row.dtype:<9} {row.sort:<18} {row.seconds:>6} s  "
                f"{row.title[:70]} {row.why[:60]}",
                flush=True,
            )
            rows.append(row)
    return rows


if __name__ == "__main__":
    main()
