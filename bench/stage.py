"""Staging throughput: ``shardprep stage`` side by side with ``aws s3 cp --recursive``.

Both CLIs copy the same prefixes from the same local S3 server (moto, started here as its own process on
127.0.0.1) into fresh directories; wall-clock time includes each CLI's start-up, as a user sees it.  Two
cases: many small objects (per-request overhead dominates) and a few large ones (multipart, bandwidth
dominates).  Prints a markdown table with the speed ratio (shardprep / aws); the target is >= 1.5x on
small objects and not slower on large ones.

    python bench/stage.py --quick          # 100 small + 2 x 16 MiB, one repetition (about a minute)
    python bench/stage.py                  # 1,000 small + 3 x 128 MiB, median of 3
    python bench/stage.py --baseline DIR   # ... and shardprep from an older checkout, interleaved

The table also gives the server's CPU time during each run (read from /proc): moto is one Python process
on the same 2 cores, and once a client needs less CPU per object than moto spends per GET, moto is the limit
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


def timed(cmd: list[str], dest: Path, server_pid: int, *, cwd: Path = REPO,
          env: dict[str, str] = ENV) -> tuple[float, float, float]:
    """(wall seconds, client CPU seconds, server CPU seconds) of one run.

    The client CPU time is the client's own (user + system of the finished child).  The server's is read
    from /proc before and after, because the moto server is one Python process sharing the 2 cores with
    the client: once a client needs less CPU per object than the server spends per GET, the server is
    the bottleneck and wall time stops showing client efficiency (on real S3, which scales out, the
    client's CPU per object is what limits a staging node).
    """
    import resource

    shutil.rmtree(dest, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_before = process_cpu_s(server_pid)
    wall = run_child(cmd, env=env, cwd=cwd, timeout=1800).wall_s
    server = process_cpu_s(server_pid) - server_before
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), server


def medians(runs: list[tuple[float, ...]]) -> tuple[float, ...]:
    """Per-column median of (wall, client CPU, server CPU) tuples."""
    return tuple(statistics.median(column) for column in zip(*runs))


@dataclass(frozen=True)
class Client:
    """One command line under test: the aws cli, shardprep from this tree, or shardprep from a baseline."""

    label: str
    argv: list[str]
    dest: Path               # emptied before each run
    cwd: Path = REPO
    env: dict[str, str] = field(default_factory=lambda: ENV)

    def run(self, server_pid: int) -> tuple[float, float, float]:
        return timed(self.argv, self.dest, server_pid, cwd=self.cwd, env=self.env)


def clients(src: str, endpoint: str, work: Path, args: argparse.Namespace) -> list[Client]:
    """aws, shardprep (this tree) and, with ``--baseline DIR``, shardprep from that checkout."""
    def shardprep(dest: Path) -> list[str]:
        return [sys.executable, "-m", "shardprep", "stage", src, str(dest), "--endpoint-url", endpoint, "--json",
                "--no-progress", "--concurrency", str(args.concurrency)]

    aws = ["aws", "s3", "cp", "--recursive", "--quiet", "--endpoint-url", endpoint, src, str(work / "aws")]
    found = [Client("aws", aws, work / "aws"), Client("shardprep", shardprep(work / "ours"), work / "ours")]
    if args.baseline:
        base = args.baseline.resolve()
        found.append(Client("baseline", shardprep(work / "base"), work / "base", cwd=base,
                            env={**ENV, "PYTHONPATH": str(base)}))
    return found


def measure(tools: list[Client], repeat: int, server_pid: int) -> dict[str, tuple[float, ...]]:
    """Median (wall, client CPU, server CPU) per client; runs interleaved so drifting load hits all alike."""
    runs: dict[str, list[tuple[float, float, float]]] = {t.label: [] for t in tools}
    for _ in range(repeat):
        for tool in tools:
            runs[tool.label].append(tool.run(server_pid))
    return {label: medians(r) for label, r in runs.items()}


def rows_for(name: str, count: int, nbytes: int, m: dict[str, tuple[float, ...]]) -> tuple[list, list, str]:
    """(main table row, baseline table row or [], per-object line) for one case."""
    (a, ac, asrv), (o, oc, osrv) = m["aws"], m["shardprep"]
    label = f"{name}: {count} x {nbytes // count // 1024:,} KiB"
    row = [label, f"{nbytes / MIB:,.1f}", a, nbytes / 1e6 / a, o, nbytes / 1e6 / o, f"{a / o:.2f}x", ac, oc,
           f"{ac / oc:.2f}x", asrv, osrv]
    base_row = []
    if "baseline" in m:
        b, bc, bsrv = m["baseline"]
        base_row = [label, a, b, o, f"{a / b:.2f}x", f"{a / o:.2f}x", bc, oc, bsrv, osrv]
    line = (f"{name}: per object, client CPU aws {1e3 * ac / count:.2f} ms, shardprep {1e3 * oc / count:.2f} ms; "
            f"server CPU {1e3 * asrv / count:.2f} ms (aws run), {1e3 * osrv / count:.2f} ms (shardprep run); "
            "CLI start-up and listing included")
    return row, base_row, line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100 small objects, 2 x 16 MiB, one repetition")
    ap.add_argument("--small", type=int, default=None, help="number of small objects")
    ap.add_argument("--small-kib", type=int, default=16, help="size of each small object")
    ap.add_argument("--large", type=int, default=None, help="number of large objects")
    ap.add_argument("--large-mib", type=int, default=None, help="size of each large object")
    ap.add_argument("--repeat", type=int, default=None, help="repetitions per measurement (median reported)")
    ap.add_argument("--concurrency", type=int, default=32, help="shardprep --concurrency")
    ap.add_argument("--baseline", type=Path, default=None, metavar="DIR",
                    help="also time shardprep from this checkout (e.g. `git worktree add DIR HEAD~1`), interleaved")
    ap.add_argument("--workdir", type=Path, default=None, help="where destinations go (default: a temp dir)")
    ap.add_argument("--server", choices=["moto", "s3rver"], default="moto",
                    help="the local S3 server both clients read from (s3rver: npm, installed by make bench-setup)")
    ap.add_argument("--s3rver", type=Path, default=S3RVER_DEFAULT, help="path of the s3rver executable")
    args = ap.parse_args()
    small = args.small or (100 if args.quick else 1000)
    large = args.large or (2 if args.quick else 3)
    large_mib = args.large_mib or (16 if args.quick else 128)
    repeat = args.repeat or (1 if args.quick else 3)
    if shutil.which("aws") is None:
        sys.exit("aws cli not found (pip install awscli)")

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-stage-"))
    server = start_server(server_command(args.server, port, work / "s3rver-data", args.s3rver), port)
    try:
        populate(endpoint, "bench", small, args.small_kib << 10, large, large_mib * MIB)
        cases = [("small", small, small * (args.small_kib << 10)), ("large", large, large * large_mib * MIB)]
        rows, base_rows, per_object = [], [], []
        for name, count, nbytes in cases:
            m = measure(clients(f"s3://bench/{name}/", endpoint, work, args), repeat, server.pid)
            row, base_row, line = rows_for(name, count, nbytes, m)
            rows.append(row)
            base_rows += [base_row] if base_row else []
            per_object.append(line)
        print_report(args, repeat, rows, base_rows, per_object)
    finally:
        server.terminate()
        server.wait(timeout=10)
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


def print_report(args: argparse.Namespace, repeat: int, rows: list, base_rows: list, per_object: list[str]) -> None:
    """The markdown report: machine line, the aws comparison, per-object CPU, the baseline comparison."""
    info = machine_info()
    print(f"machine: {info['usable_cpus']} CPUs ({info['cpu_model']}), load at start "
          f"{info['load_avg_at_start']}; S3 server: {args.server}; repetitions: {repeat} (median); "
          f"shardprep --concurrency "
          f"{args.concurrency}, aws cli defaults (10 concurrent requests, 8 MB parts)\n")
    print(markdown_table(["case", "MiB", "aws s3 cp s", "aws MB/s", "shardprep s", "shardprep MB/s",
                          "speed ratio", "aws client CPU s", "shardprep client CPU s", "CPU ratio",
                          "server CPU s (aws run)", "server CPU s (shardprep run)"], rows))
    print()
    print("\n".join(f"- {line}" for line in per_object))
    if base_rows:
        print(f"\nbaseline: shardprep from {args.baseline}, interleaved with the runs above\n")
        print(markdown_table(["case", "aws s", "baseline s", "shardprep s", "baseline speed ratio",
                              "shardprep speed ratio", "baseline client CPU s", "shardprep client CPU s",
                              "server CPU s (baseline run)", "server CPU s (shardprep run)"], base_rows))


if __name__ == "__main__":
    main()
