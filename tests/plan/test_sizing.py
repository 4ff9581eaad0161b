"""The default task sizing (issue 12): the rule, the packer's guarantees on any mix of files, the shard
ratio sample, the record in job.json, stickiness across resubmissions, and the opt-out flags."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import orjson
import pytest
from conftest import examples
from helpers import plan_tasks, run_cli
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from shardprep.api import plan_job
from shardprep.errors import ConfigError
from shardprep.inputs.discover import InputFile, discover_inputs
from shardprep.job import cutting, sizing
from shardprep.job.cutting import split_into_tasks
from shardprep.job.options import PlanOptions, TokenizeOptions
from shardprep.job.shard_ratio import sample_shard_ratio
from shardprep.job.sizing import (
    MAX_TARGET,
    MIB,
    MIN_SHARD_BYTES,
    MIN_TARGET,
    UNKNOWN_RATIO_FLOOR,
    auto_sizing,
    floor_bytes,
)

MB = 1_000_000


def _task_bytes(task: list, inputs: list[InputFile]) -> int:
    return sum((inputs[w.input].size if w.end is None else w.end) - w.start for w in task)


def _holds_a_short_last_piece(task: list, inputs: list[InputFile]) -> bool:
    """The task holds the last piece of a split file (which line boundaries may leave short)."""
    return any(w.start > 0 and w.end in (None, inputs[w.input].size) for w in task)


# -- every byte exactly once, on real files ------------------------------------------------------------
_file = st.tuples(st.lists(st.integers(0, 300), min_size=1, max_size=30), st.booleans())   # line lengths, gz


def _discovered(d, files):
    """``files`` (line lengths, gzipped?) written under ``d`` as f00.txt[.gz] ..., then discovered."""
    for k, (lines, gz) in enumerate(files):
        data = b"".join(b"w" * n + b"\n" for n in lines)
        (d / f"f{k:02d}.txt{'.gz' if gz else ''}").write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return discover_inputs([str(d)])


@settings(max_examples=examples(40), deadline=None)
@given(files=st.lists(_file, min_size=1, max_size=12), target=st.integers(200, 3000))
def test_every_byte_of_every_input_is_planned_exactly_once(tmp_path_factory, files, target):
    inputs = _discovered(tmp_path_factory.mktemp("mix"), files)
    tasks = split_into_tasks(inputs, target, TokenizeOptions())
    covered: dict[int, list[tuple[int, int]]] = {}
    for task in tasks:
        for w in task:
            covered.setdefault(w.input, []).append((w.start, inputs[w.input].size if w.end is None else w.end))
    assert sorted(covered) == list(range(len(inputs)))            # every input, in some task
    for i, ranges in covered.items():
        ranges.sort()
        assert ranges[0][0] == 0 and ranges[-1][1] == inputs[i].size, inputs[i].path
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), ranges   # no gap, no overlap
    for task in tasks:      # no tiny task unless it is the only one or holds the last piece of its input
        if len(tasks) > 1 and _task_bytes(task, inputs) < target / 4:
            assert _holds_a_short_last_piece(task, inputs), (task, target)


# -- the rule's guarantees on any mix of sizes (split points computed, not read) -----------------------
def _even_text_split(idx: int, inp: InputFile, parts: int, paragraph: bool) -> list:
    step = inp.size / parts
    bounds = [0] + [round(k * step) for k in range(1, parts)] + [inp.size]
    return [cutting.WorkItem(idx, s, e, "bytes", None) for s, e in zip(bounds, bounds[1:])]


_sizes = st.lists(st.one_of(st.integers(1, 200 * MB), st.integers(1, 5_000_000_000)), min_size=1, max_size=60)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=_sizes, slots=st.integers(1, 4096), ratio=st.one_of(st.none(), st.floats(0.1, 4.0)),
       gz=st.lists(st.booleans(), max_size=60))
@example(sizes=[1, 1 << 29], slots=2, ratio=0.125, gz=[])     # one task of 512 MiB + 1 byte: the floor's
def test_no_shard_under_16_mib_unless_the_dataset_is_smaller(monkeypatch, sizes, slots, ratio, gz):
    """(Split points are computed, not read.)  With shard bytes = ratio x input bytes (the sampled ratio, or
    >= 0.25 when unknown), every task of the default rule makes a shard >= 16 MiB, unless the whole
    dataset makes less; no task is under half a step; the target is never above the cap unless the floor
    needs it (then under two floors); and when every file can be cut, the tasks are exactly the count chosen: a whole number of
    waves of the slots, or fewer tasks than slots when the floor says so."""
    monkeypatch.setattr(cutting, "aligned_boundary", lambda path, offset, paragraph: offset)
    inputs = [InputFile(f"/d/f{k:03d}.jsonl", s, 0, "jsonl", "gz" if k < len(gz) and gz[k] else None)
              for k, s in enumerate(sizes)]
    rule = auto_sizing(inputs, slots, "test", ratio)
    target = rule.target_task_bytes
    # above the cap only where the floor needs it: k tasks because k + 1 would each be under the floor,
    # so each holds less than two floors (512 MiB + 1 byte on 2 slots at 320 MiB a floor is one task)
    assert target is not None and target <= max(MAX_TARGET, floor_bytes(ratio)) or target < 2 * floor_bytes(ratio)
    total = sum(sizes)
    n = sizing.balanced_tasks(rule, total)
    assert n is not None
    tasks = list(cutting.iter_balanced(inputs, n, TokenizeOptions()))
    r = ratio or 0.25
    for task in tasks:
        nbytes = _task_bytes(task, inputs)
        assert nbytes >= total / n / 2 - 1 or len(tasks) == 1
        if total * r >= MIN_SHARD_BYTES:
            assert nbytes * r >= MIN_SHARD_BYTES * 0.999, (nbytes, target, ratio)
    assert len(tasks) <= n
    if not any(i.compression for i in inputs):
        assert len(tasks) == n
        if total > slots * max(MAX_TARGET, floor_bytes(ratio)):
            assert n % slots == 0                                   # full waves
        elif total / slots > floor_bytes(ratio):
            assert n == slots                                       # one full wave


@settings(max_examples=examples(40), deadline=None)
@given(files=st.lists(_file, min_size=1, max_size=12), n=st.integers(1, 9))
def test_balanced_tasks_plan_every_byte_exactly_once_in_order(tmp_path_factory, files, n):
    inputs = _discovered(tmp_path_factory.mktemp("bal"), files)
    tasks = list(cutting.iter_balanced(inputs, n, TokenizeOptions()))
    flat = [w for t in tasks for w in t]
    assert len(tasks) <= n and all(tasks)
    assert [w.input for w in flat] == sorted(w.input for w in flat)          # input order
    for i, inp in enumerate(inputs):
        ranges = [(w.start, inp.size if w.end is None else w.end) for w in flat if w.input == i]
        assert ranges[0][0] == 0 and ranges[-1][1] == inp.size               # every byte, no gap or overlap
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


def test_the_rule_on_the_documented_shapes():
    small = [InputFile(f"/d/{k}.jsonl", 45_000, 0, "jsonl", None) for k in range(3000)]
    s = auto_sizing(small, 2, "test", 1.8)
    assert s.target_task_bytes == 67_500_000 and "one task per slot" in s.reason    # 135 MB on 2 CPUs
    tiny = [InputFile(f"/d/{k}.jsonl", 4_500, 0, "jsonl", None) for k in range(3000)]
    s = auto_sizing(tiny, 2, "test", 1.8)
    assert s.target_task_bytes == MIN_TARGET and "under the" in s.reason        # 13.5 MB: one task
    big = [InputFile(f"/d/{k}.jsonl", 2 << 30, 0, "jsonl", None) for k in range(64)]
    assert auto_sizing(big, 2, "test", 0.5).target_task_bytes == MAX_TARGET        # capped: waves
    assert auto_sizing(big, 1024, "test", 0.5).target_task_bytes == 128 * MIB      # one task per slot
    many = auto_sizing(big, 100_000, "test", 0.5)              # more slots than floor-sized tasks
    assert floor_bytes(0.5) <= many.target_task_bytes < floor_bytes(0.5) * 1.01
    waves = auto_sizing(big, 100, "test", 0.5)                 # 1.3 GiB per slot: 3 full waves of 100
    assert sizing.balanced_tasks(waves, 64 * (2 << 30)) == 300 and "3 full waves" in waves.reason
    assert floor_bytes(None) == UNKNOWN_RATIO_FLOOR
    assert floor_bytes(0.05) == math.ceil(2 * MIN_SHARD_BYTES * 1.25 / 0.05 / MIB) * MIB   # sparse text: higher


# -- the sample --------------------------------------------------------------------------------------------
def test_shard_ratio_is_sampled_from_text_inputs_only(tmp_path, sample_tokenizer):
    (tmp_path / "a.jsonl").write_text("".join(orjson.dumps({"text": "hello world " * 20, "id": i}).decode() + "\n"
                                              for i in range(200)))
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(b"hello world\n" * 100))
    from shardprep.tokenizer.backend import HFBackend

    tok = HFBackend(sample_tokenizer.read_text())
    inputs = discover_inputs([str(tmp_path)])
    ratio = sample_shard_ratio(inputs, tok, TokenizeOptions(), 2)
    assert ratio is not None and 0.05 < ratio < 2
    assert sample_shard_ratio([i for i in inputs if i.compression], tok, TokenizeOptions(), 2) is None
    # a wider id doubles the shard bytes per input byte
    assert sample_shard_ratio(inputs, tok, TokenizeOptions(), 4) == pytest.approx(2 * ratio)


# -- the plan: record, printout, stickiness, opt-outs -------------------------------------------------------
@pytest.fixture()
def small_files(tmp_path) -> Path:
    d = tmp_path / "in"
    d.mkdir()
    for k in range(40):
        (d / f"r{k:03d}.jsonl").write_text("".join(
            orjson.dumps({"text": f"리뷰 {k} 번째 문서 {j} 좋아요"}).decode() + "\n" for j in range(20)))
    return d


def test_small_files_become_one_task_by_default_and_the_plan_says_why(tmp_path, small_files, sample_tokenizer):
    out = tmp_path / "out"
    proc = run_cli("plan", "-i", small_files, "-o", out, "-t", sample_tokenizer, "--parallel-tasks", "8")
    assert "40 input(s)" in proc.stdout and "-> 1 task(s)" in proc.stdout
    assert "sizing: target 64.0 MiB of input per task -> 1 task(s) [auto:" in proc.stdout
    assert "8 task slot(s) (--parallel-tasks)" in proc.stdout
    job = orjson.loads((out / "job.json").read_bytes())
    assert job["sizing"]["rule"] == "auto" and job["sizing"]["parallel_tasks"] == 8
    assert job["sizing"]["shard_ratio"] > 0
    assert job["plan_options"] == {"target_task_bytes": MIN_TARGET}
    assert [len(t.items) for t in plan_tasks(out)] == [40]


def test_one_file_per_task_keeps_the_literal_shape(tmp_path, small_files, sample_tokenizer):
    out = tmp_path / "out"
    proc = run_cli("plan", "-i", small_files, "-o", out, "-t", sample_tokenizer, "--one-file-per-task")
    assert "sizing: one file per task -> 40 task(s) [one-file-per-task:" in proc.stdout
    assert [len(t.items) for t in plan_tasks(out)] == [1] * 40
    bad = run_cli("plan", "-i", small_files, "-o", tmp_path / "o2", "-t", sample_tokenizer, "--one-file-per-task",
                  "--target-task-bytes", "1M", check=False)
    assert bad.returncode == ConfigError.exit_code and "cannot be combined" in bad.stderr


def test_explicit_target_wins(tmp_path, small_files, sample_tokenizer):
    out = tmp_path / "out"
    proc = run_cli("plan", "-i", small_files, "-o", out, "-t", sample_tokenizer, "--target-task-bytes", "4K", "--force-small-tasks")
    job = orjson.loads((out / "job.json").read_bytes())
    assert job["sizing"]["rule"] == "target" and job["plan_options"]["target_task_bytes"] == 4096
    assert len(plan_tasks(out)) > 1 and "[target: --target-task-bytes 4.0 KiB]" in proc.stdout


def test_a_replan_keeps_the_auto_sizing_whatever_the_cluster_now_has(tmp_path, sample_tokenizer, monkeypatch):
    monkeypatch.setattr(sizing, "floor_bytes", lambda ratio: MIB)      # small files, a small floor
    d = tmp_path / "in"
    d.mkdir()
    for k in range(6):
        (d / f"p{k}.txt").write_text(("word " * 19 + "\n") * 10_000)    # 1 MB each
    out = tmp_path / "out"
    _, first = plan_job([d], out, sample_tokenizer, plan_options=PlanOptions(), task_slots=(1, "test"))
    assert first.n_tasks == 1
    _, again = plan_job([d], out, sample_tokenizer, plan_options=PlanOptions(), task_slots=(64, "test"))
    assert again.fingerprint == first.fingerprint and again.sizing == first.sizing
    with pytest.raises(Exception, match="different plan"):
        plan_job([d], out, sample_tokenizer, plan_options=PlanOptions(target_task_bytes=1 << 20))
    _, fresh = plan_job([d], out, sample_tokenizer, plan_options=PlanOptions(), task_slots=(64, "test"),
                        overwrite=True)
    # 6 MB over 64 slots with a 1 MiB floor: as many floor-sized tasks as the data holds
    assert fresh.sizing is not None and fresh.sizing.parallel_tasks == 64 and fresh.n_tasks == 5


def test_a_plan_parses_its_tokenizer_once_and_job_json_at_most_once(tmp_path, sample_tokenizer, monkeypatch):
    """Issue 24 (decide once): planning loads the hf tokenizer once (resolving it, the shard-ratio sample and
    the plan-time check share it) and reads the job.json already in the output once (the sizing to keep
    and the plan to compare come from the same read); the sizing is decided once and job.json keeps the
    number twice only for old readers (``plan_options``, derived from ``sizing``)."""
    import tokenizers

    from shardprep.job.schema import Job
    from shardprep.tokenizer import parsed

    (tmp_path / "a.jsonl").write_text("".join(orjson.dumps({"text": f"document {i} " * 20}).decode() + "\n"
                                              for i in range(300)))
    real_tokenizer, real_parse = tokenizers.Tokenizer, Job.parse
    calls = {"from_str": 0, "parse": 0}

    class Counting:
        @staticmethod
        def from_str(text):
            calls["from_str"] += 1
            return real_tokenizer.from_str(text)

        @staticmethod
        def from_file(path):
            calls["from_str"] += 1
            return real_tokenizer.from_file(path)

        @staticmethod
        def from_buffer(data):
            calls["from_str"] += 1
            return real_tokenizer.from_buffer(data)

    def parse(data, where):
        calls["parse"] += 1
        return real_parse(data, where)

    monkeypatch.setattr(tokenizers, "Tokenizer", Counting)
    monkeypatch.setattr(Job, "parse", staticmethod(parse))
    parsed.clear()              # parsed once per process: start from none
    out = tmp_path / "out"
    plan_job([tmp_path], out, sample_tokenizer, TokenizeOptions(backend="hf"), task_slots=(2, "test"))
    assert calls == {"from_str": 1, "parse": 0}
    plan_job([tmp_path], out, sample_tokenizer, TokenizeOptions(backend="hf"), task_slots=(2, "test"))  # again
    assert calls == {"from_str": 1, "parse": 1}     # the same file in the same process: not parsed again
    stored = orjson.loads((out / "job.json").read_bytes())
    assert stored["plan_options"]["target_task_bytes"] == stored["sizing"]["target_task_bytes"]
