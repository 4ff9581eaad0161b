"""``shardprep doctor``: tell a user, before they burn an allocation, what will make tokenization slow or fail.

Every check returns a verdict (ok / warn / fail), a one-line message and, when something should change, the
fix.  A *fail* is something that would make the job fail (the tokenizer does not load, the output cannot be
written, the planned shards do not fit, a Slurm executor was asked for but Slurm is unreachable); the
report's exit status is then the code of the first failing check (``EXIT_TOKENIZER``, ``EXIT_INPUT`` or
``EXIT_ENVIRONMENT``).  Warnings cost speed or convenience but not the result, and exit 0.

This module holds the checks that need the tokenizer and the data (loading, speed, backend, input, free
space against the planned output size) and the runner; ``doctor.machine`` holds the machine checks.  The
JSON form is documented in docs/doctor.md; keep the two in step.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from shardprep import __version__
from shardprep.doctor.machine import (
    FAIL,
    OK,
    WARN,
    Check,
    check_cpus,
    check_environment,
    check_filesystem,
    check_memory,
    check_slurm,
    check_versions,
    check_write_permission,
)
from shardprep.doctor.shape import paragraph_inputs, submit_sizing
from shardprep.errors import EXIT_INPUT, EXIT_OK, EXIT_TOKENIZER, ShardprepError
from shardprep.inputs.planned import OpenInput, parquet_file
from shardprep.inputs.remote import in_parallel
from shardprep.job.resources import usable_cpus
from shardprep.job.sizing import describe
from shardprep.storage.local import existing_ancestor
from shardprep.storage.locations import StorageOptions, is_url
from shardprep.units import human_bytes

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.inputs.discover import InputFile
    from shardprep.tokenizer.backend import Backend

log = logging.getLogger(__name__)

SCHEMA = "shardprep.doctor/1"
SLOW_TOKENS_PER_S = 100_000      # per core; GPT-2 with `tokenizers` does ~580k, gigatoken several million
SAMPLE_DOCS = 256
SAMPLE_CHARS = 256 * 1024
SAMPLE_ROWS = 2_000              # tabular inputs: rows read for the sample
SAMPLE_BYTES = 4 << 20           # uncompressed text inputs: bytes read for the sample
TIMING_S = 0.5                   # encode the sample repeatedly for at least this long
COMPRESSED_TEXT_RATIO = 4.0      # assumed text bytes per compressed byte (gz/zst) for size estimates
SPLIT_LIMIT = 4 << 30            # a compressed input above this is one long task (it cannot be split)
REMOTE_PROBE_BYTES = 64 << 10    # read from the first remote input: its URL is readable from here
PACK_OVERHEAD = 1.03             # shard bytes over raw token bytes (docs/format.md)


@dataclass
class Context:
    """The question (tokenizer, output, inputs) and what earlier checks learned for later ones."""

    tokenizer: str
    output: Path
    inputs: list[str]
    text_field: str
    executor: str | None
    environ: Mapping[str, str]
    resolved: Any = None              # ResolvedTokenizer once the tokenizer check passed
    found: list = field(default_factory=list)   # InputFile list
    text_bytes: int | None = None     # estimated text bytes of all inputs
    sample: list[str] = field(default_factory=list)
    sample_source: str = "generated English text"
    bytes_per_token: float | None = None
    doc_bytes: float | None = None
    input_warnings: list[str] = field(default_factory=list)   # sampled inputs that look binary (inputs.health)
    txt_mode: str = "line"
    task_slots: tuple[int, str] | None = None   # the executor's (submit's sizing divides by them); None: CPUs here
    n_tasks: int | None = None                  # the tasks submit would plan (doctor.shape)
    storage: StorageOptions | None = None       # how to reach input URLs (the found inputs carry it)


@dataclass
class Report:
    checks: list[Check]

    @property
    def exit_code(self) -> int:
        return next((c.exit_code for c in self.checks if c.verdict == FAIL), EXIT_OK)

    def to_dict(self) -> dict[str, Any]:
        counts = {v: sum(c.verdict == v for c in self.checks) for v in (OK, WARN, FAIL)}
        return {"schema": SCHEMA, "shardprep_version": __version__, "ok": counts[FAIL] == 0,
                "exit_code": self.exit_code, "summary": counts, "checks": [c.to_dict() for c in self.checks]}


# ------------------------------------------------------------------------------------------- tokenizer


def _loads_offline(spec: str) -> tuple[bool, str]:
    """Load a hub tokenizer in a child process with the hub switched off (the hub library reads
    HF_HUB_OFFLINE once, at import, so this process cannot test it for itself)."""
    code = "import sys\nfrom shardprep.tokenizer.load import resolve_tokenizer\nresolve_tokenizer(sys.argv[1])"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    try:
        proc = subprocess.run([sys.executable, "-c", code, spec], capture_output=True, text=True, env=env,
                              timeout=180)
    except subprocess.TimeoutExpired:
        return False, "timed out"
    lines = proc.stderr.strip().splitlines()
    return proc.returncode == 0, lines[-1] if lines else ""


def check_tokenizer(ctx: Context) -> Check:
    from shardprep.tokenizer.load import resolve_tokenizer

    spec = ctx.tokenizer
    local = Path(spec).exists() or spec.startswith((".", "/", "~")) or spec.endswith(".json")
    offline, offline_error = (True, "") if local else _loads_offline(spec)
    started = time.perf_counter()
    try:
        ctx.resolved = resolve_tokenizer(spec)
    except ShardprepError as e:
        return Check("tokenizer", FAIL, f"cannot load {spec}: {e}", e.hint or "pass a tokenizer.json, a directory "
                     "holding one, or a hub id", {"spec": spec, "offline": False}, EXIT_TOKENIZER)
    info = ctx.resolved.info
    details = {"spec": spec, "local": local, "offline": offline, "load_s": round(time.perf_counter() - started, 3),
               **{k: v for k, v in info.to_dict().items() if k != "source"},
               "special_sources": {k: {"source": c.source, "why": c.why} for k, c in ctx.resolved.choices.items()}}
    lines = ctx.resolved.describe_specials()
    what = f"vocab {info.vocab_size:,}, {info.dtype} ids; {lines['eos']}; {lines['bos']}"
    if not offline:
        details["offline_error"] = offline_error
        return Check("tokenizer", WARN, f"{spec} loads only with hub access ({offline_error}); {what}",
                     "plan/submit must run where the hub is reachable, or save it once and pass the directory: "
                     f"AutoTokenizer.from_pretrained({spec!r}).save_pretrained(DIR)", details, EXIT_TOKENIZER)
    if info.eos_id is None:
        return Check("tokenizer", WARN, f"{spec} loads offline but has no EOS token; submit appends EOS by default",
                     "name one with --eos-token, or pass --no-eos", details, EXIT_TOKENIZER)
    return Check("tokenizer", OK, f"{spec} loads offline in {details['load_s']:.2f} s; {what}", None, details,
                 EXIT_TOKENIZER)


# ------------------------------------------------------------------------------------------------ input


def _text_bytes(inp: InputFile) -> int:
    """Text bytes an input expands to (an estimate on the safe side: JSON syntax counts as text)."""
    if inp.format == "parquet":
        with OpenInput(inp) as opened:
            md = parquet_file(opened).metadata
        return sum(md.row_group(g).total_byte_size for g in range(md.num_row_groups))
    if inp.compression:
        return int(inp.size * COMPRESSED_TEXT_RATIO)
    return inp.size


def _read_sample(ctx: Context) -> dict:
    """Up to SAMPLE_DOCS documents from the first inputs, read with the real readers and skip policy."""
    from shardprep.inputs.readers import SkipLog, WorkItem, iter_documents
    from shardprep.job.options import TokenizeOptions

    opts = TokenizeOptions(text_field=ctx.text_field, txt_mode=ctx.txt_mode)
    skips = SkipLog()
    chars = 0
    for i, inp in enumerate(ctx.found):
        if inp.tabular:
            item = WorkItem(i, 0, min(inp.rows or 0, SAMPLE_ROWS), "rows", 1)
        else:
            item = WorkItem(i, 0, min(inp.size, SAMPLE_BYTES) if inp.splittable else None, "bytes", 1)
        for text in iter_documents(inp, item, opts, skips):
            ctx.sample.append(text)
            chars += len(text)
            if len(ctx.sample) >= SAMPLE_DOCS or chars >= SAMPLE_CHARS:
                ctx.input_warnings = skips.warnings
                return skips.counts
    ctx.input_warnings = skips.warnings
    return skips.counts


def _remote_read(found: list[InputFile]) -> str:
    """The first remote input's head read from here (its URL was listed by discovery), for the message."""
    remote = [i for i in found if is_url(i.path)]
    if not remote:
        return ""
    with OpenInput(remote[0]) as opened:
        head = opened.raw.read(min(remote[0].size, REMOTE_PROBE_BYTES))
        opened.check()
    return f"; {len(remote):,} remote object(s) listed, {human_bytes(len(head))} of {remote[0].path} read from here"


def check_input(ctx: Context) -> Check:
    from shardprep.inputs.discover import discover_inputs
    from shardprep.inputs.fields import require_text_field

    if not ctx.inputs:
        return Check("input", OK, "no --input given: not checked (speed uses generated text; no size estimate)",
                     "pass --input to check the data and estimate the output size", {"skipped": True}, EXIT_INPUT)
    try:
        ctx.found = discover_inputs(ctx.inputs, storage=ctx.storage)
        require_text_field(ctx.found, ctx.text_field)       # what plan and submit refuse
        remote_parquet = any(i.format == "parquet" and is_url(i.path) for i in ctx.found)
        # a remote parquet footer is a request: several at once, as plan reads them
        ctx.text_bytes = sum(in_parallel(_text_bytes, ctx.found) if remote_parquet else map(_text_bytes, ctx.found))
        skipped = _read_sample(ctx)
        remote = _remote_read(ctx.found)
    except ShardprepError as e:
        return Check("input", FAIL, str(e), e.hint or "fix or remove the named input", {"skipped": False}, EXIT_INPUT)
    formats: dict[str, int] = {}
    for inp in ctx.found:
        key = inp.format + (f".{inp.compression}" if inp.compression else "")
        formats[key] = formats.get(key, 0) + 1
    total = sum(i.size for i in ctx.found)
    sizing, ctx.n_tasks = submit_sizing(ctx.found, ctx.resolved, ctx.text_field, ctx.txt_mode, ctx.task_slots,
                                        ctx.output)
    details = {"skipped": False, "files": len(ctx.found), "bytes": total,
               "estimated_text_bytes": ctx.text_bytes, "formats": formats, "tasks_one_per_file": len(ctx.found),
               "default_target_task_bytes": sizing.target_task_bytes, "default_tasks": ctx.n_tasks,
               "sample_documents": len(ctx.sample), "sample_skips": skipped}
    msg = (f"{len(ctx.found):,} file(s), {human_bytes(total)} ({', '.join(f'{n} {k}' for k, n in formats.items())}); "
           f"submit's {describe(sizing, ctx.n_tasks)} (--one-file-per-task: {len(ctx.found):,}){remote}")
    if ctx.sample:
        ctx.sample_source = f"the first documents of {ctx.found[0].path}"
    if ctx.input_warnings:
        details["suspicious_inputs"] = ctx.input_warnings
        return Check("input", WARN, msg + f"; {len(ctx.input_warnings)} sampled input(s) look binary or "
                     f"mis-encoded: {ctx.input_warnings[0]}", "look at the named file(s) (`file PATH`): remove them, "
                     "convert them to UTF-8, or name the right --text-field", details, EXIT_INPUT)
    big = [i.path for i in ctx.found if i.compression and i.size > SPLIT_LIMIT]
    if big:
        return Check("input", WARN, msg + f"; {len(big)} compressed file(s) over {human_bytes(SPLIT_LIMIT)} cannot be "
                     f"split, so each is one long task (e.g. {big[0]})",
                     "recompress into smaller files, or store them uncompressed so --target-task-bytes can split "
                     "them", details, EXIT_INPUT)
    paragraphs = paragraph_inputs(ctx.found, ctx.txt_mode)
    if paragraphs:
        details["paragraph_inputs"] = paragraphs
        return Check("input", WARN, msg + f"; {paragraphs[0]} looks like paragraphs separated by blank lines: "
                     "--txt-mode paragraph?", "--txt-mode line (the default) makes every line a document; give "
                     "--txt-mode paragraph to keep each paragraph whole", details, EXIT_INPUT)
    return Check("input", OK, msg, None, details, EXIT_INPUT)


# ------------------------------------------------------------------------------------ speed and backend


def _tokens_per_s(backend: Backend, texts: list[str]) -> tuple[float, int]:
    """(tokens per second, tokens per pass) encoding ``texts`` repeatedly for at least TIMING_S."""
    per_pass, passes = 0, 0
    started = time.perf_counter()
    while passes == 0 or (time.perf_counter() - started < TIMING_S and passes < 50):
        flat, _ = backend.encode_batch(texts)
        per_pass = int(flat.size)
        passes += 1
    return per_pass * passes / (time.perf_counter() - started), per_pass


def _not_checked(name: str, why: str) -> Check:
    return Check(name, WARN, f"not checked: {why}", "fix the failures above, then run doctor again", {"skipped": True})


def check_speed(ctx: Context) -> Check:
    from shardprep.demo_data import sample_documents
    from shardprep.tokenizer.backend import HFBackend

    if ctx.resolved is None:
        return _not_checked("tokenizer_speed", "the tokenizer did not load")
    if not ctx.sample:
        ctx.sample = sample_documents(SAMPLE_DOCS)
    threads = os.environ.get("RAYON_NUM_THREADS", "unset")
    tps, tokens = _tokens_per_s(HFBackend(ctx.resolved.json), ctx.sample)
    sample_bytes = sum(len(t.encode("utf-8")) for t in ctx.sample)
    ctx.bytes_per_token = sample_bytes / max(tokens, 1)
    ctx.doc_bytes = sample_bytes / len(ctx.sample)
    details: dict[str, Any] = {"backend": "hf", "tokens_per_s": round(tps), "rayon_threads": threads,
                               "sample": ctx.sample_source, "sample_documents": len(ctx.sample),
                               "sample_bytes": sample_bytes, "bytes_per_token": round(ctx.bytes_per_token, 3)}
    msg = f"{tps / 1e6:,.2f} M tokens/s per core with hf on {ctx.sample_source} ({ctx.bytes_per_token:.2f} bytes/token)"
    if ctx.text_bytes:
        est_tokens = ctx.text_bytes / ctx.bytes_per_token
        details["estimated_tokens"] = round(est_tokens)
        details["estimated_core_hours_hf"] = round(est_tokens / tps / 3600, 2)
        msg += f"; ~{est_tokens:,.3g} tokens in the input, ~{details['estimated_core_hours_hf']:,} core-hours with hf"
    if tps < SLOW_TOKENS_PER_S:
        return Check("tokenizer_speed", WARN, msg + f": slower than {SLOW_TOKENS_PER_S:,} tokens/s per core",
                     "check the tokenizer for expensive normalizers/pre-tokenizers, give tasks more CPUs "
                     "(--cpus-per-task), and see whether --backend auto can use gigatoken", details)
    return Check("tokenizer_speed", OK, msg, None, details)


def check_backend(ctx: Context) -> Check:
    import importlib.util

    from shardprep.tokenizer.backend import select_backend

    if ctx.resolved is None:
        return _not_checked("backend", "the tokenizer did not load")
    backend, record = select_backend("auto", ctx.resolved.json, allow_special_tokens=False, sample_texts=ctx.sample)
    details: dict[str, Any] = {"auto_picks": backend.name, "record": record.to_dict()}
    check = record.check
    if backend.name != "hf":
        tps, _ = _tokens_per_s(backend, ctx.sample)
        details["tokens_per_s"] = round(tps)
        return Check("backend", OK, f"auto picks {backend.name} {record.version or ''}: it reproduced the hf ids "
                     f"on the hard cases and the sample; {tps / 1e6:,.2f} M tokens/s per core", None, details)
    if importlib.util.find_spec("gigatoken") is None:
        return Check("backend", OK, "auto uses hf (the reference): gigatoken is not installed",
                     "pip install 'shardprep[fast]' for a backend that is often 10x faster per core (used only "
                     "after it reproduces the hf ids)", details)
    reason = record.fallback_reason or (check.reason if check else None) or "not verified"
    why = "does not reproduce the hf ids" if check and check.reference else "cannot run this tokenizer"
    details["reason"] = reason
    candidate = check.candidate if check and check.candidate else "gigatoken"
    return Check("backend", WARN, f"tasks will use hf (the reference), not {candidate}, "
                 f"which {why} ({reason}); that is the check working: ids stay exact, at hf speed (see "
                 "tokenizer_speed)", "nothing to fix for correctness; expect hf speed, or use --backend hf to skip "
                 "the check", details)


# ------------------------------------------------------------------------------------------ free space


def check_free_space(ctx: Context) -> Check:
    probe = existing_ancestor(ctx.output)
    free = shutil.disk_usage(probe).free
    details: dict[str, Any] = {"path": str(probe), "free_bytes": free, "planned_output_bytes": None}
    if not (ctx.text_bytes and ctx.bytes_per_token and ctx.resolved):
        return Check("free_space", OK, f"{human_bytes(free)} free on {probe} (no --input: planned size not estimated)",
                     None, details)
    itemsize = 2 if ctx.resolved.info.dtype == "uint16" else 4
    docs = ctx.text_bytes / max(ctx.doc_bytes or 1.0, 1.0)
    tokens = ctx.text_bytes / ctx.bytes_per_token + docs              # + one EOS per document
    planned = int((tokens + docs) * itemsize * PACK_OVERHEAD)         # + one length per document
    details.update(planned_output_bytes=planned, estimated_documents=round(docs), estimated_tokens=round(tokens))
    msg = f"{human_bytes(free)} free on {probe}; the shards need ~{human_bytes(planned)}"
    if free < planned:
        return Check("free_space", FAIL, msg, "free space, ask for quota, or choose another --output", details)
    if free < planned * 1.25:
        return Check("free_space", WARN, msg + " (less than 25% to spare)",
                     "free space before submitting: other jobs may fill the file system meanwhile", details)
    return Check("free_space", OK, msg, None, details)


# ------------------------------------------------------------------------------------------------ runner


def _machine_checks(ctx: Context) -> list[Callable[[], Check]]:
    return [
        lambda: check_cpus(ctx.environ),
        lambda: check_memory(usable_cpus()),
        lambda: check_filesystem(ctx.output),
        lambda: check_free_space(ctx),
        lambda: check_write_permission(ctx.output),
        lambda: check_slurm(ctx.executor, ctx.n_tasks),
        lambda: check_environment(ctx.environ),
        lambda: check_versions(),
    ]


def run_doctor(tokenizer: str, output: str | Path, inputs: Sequence[str] = (), *, text_field: str = "text",
               executor: str | None = None, environ: Mapping[str, str] | None = None,
               storage: StorageOptions | None = None, txt_mode: str = "line",
               task_slots: tuple[int, str] | None = None) -> Report:
    """Run every check in order and return the report (never raises for what it finds); ``storage``: how
    to reach input URLs (the S3 options of the command line); ``task_slots``: the executor's, as ``submit``
    sizes its tasks (None: this machine's CPUs)."""
    ctx = Context(str(tokenizer), Path(output), [str(i) for i in inputs], text_field, executor,
                  dict(os.environ if environ is None else environ), txt_mode=txt_mode, task_slots=task_slots,
                  storage=storage)
    return _run_doctor(ctx)


def _run_doctor(ctx: Context) -> Report:
    steps: list[tuple[str, Callable[[], Check]]] = [
        ("tokenizer", lambda: check_tokenizer(ctx)), ("input", lambda: check_input(ctx)),
        ("tokenizer_speed", lambda: check_speed(ctx)), ("backend", lambda: check_backend(ctx)),
    ]
    names = ("cpus", "memory", "filesystem", "free_space", "write_permission", "slurm", "environment", "versions")
    steps += list(zip(names, _machine_checks(ctx)))
    checks = []
    for name, step in steps:
        try:
            checks.append(step())
        except Exception as e:  # a check must never hide the others
            log.debug("check %s crashed", name, exc_info=True)
            checks.append(Check(name, FAIL, f"the check itself failed: {type(e).__name__}: {e}",
                                "run with -v and report it as a bug", {"skipped": True, "error": repr(e)}))
    return Report(checks)
