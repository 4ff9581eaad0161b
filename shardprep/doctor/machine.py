"""The machine half of ``shardprep doctor``: CPUs, memory, the output file system, write permission, Slurm,
environment variables and installed versions.

Each function inspects one thing and returns a :class:`Check` with a verdict and, unless all is well, the
fix in one sentence.  They take what they need as arguments (the output path, a snapshot of the
environment) so a test can call them on a prepared situation; ``shardprep.doctor.checks`` runs them in order.
Secrets are never read into a report: for credential variables only "set"/"unset" is recorded.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Mapping

from shardprep._extras import EXTRA_OF
from shardprep.errors import EXIT_ENVIRONMENT, EnvironmentProblem
from shardprep.records import NOT_WRITTEN, Record
from shardprep.storage.local import existing_ancestor
from shardprep.units import human_bytes

OK, WARN, FAIL = "ok", "warn", "fail"
MEM_PER_TASK = 512 << 20   # a task process: tokenizer (~0.2 GB for GPT-2), one chunk, reader buffers

ENV_SHOWN = ("RAYON_NUM_THREADS", "RAYON_RS_NUM_CPUS", "TOKENIZERS_PARALLELISM", "OMP_NUM_THREADS", "HF_HOME",
             "HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "AWS_PROFILE",
             "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_CONFIG_FILE",
             "AWS_SHARED_CREDENTIALS_FILE", "SLURM_JOB_ID", "SLURM_CPUS_PER_TASK", "SLURM_MEM_PER_NODE",
             "SLURM_MEM_PER_CPU")
ENV_SECRET = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "HF_TOKEN",
              "HUGGING_FACE_HUB_TOKEN")
OPTIONAL_PACKAGES = tuple(EXTRA_OF)          # their declared minimum versions are checked too


@dataclass
class Check(Record):
    """One line of the doctor's report (see docs/doctor.md for the JSON form)."""

    name: str
    verdict: str                       # ok | warn | fail
    message: str
    fix: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    exit_code: int = field(default=EXIT_ENVIRONMENT, metadata=NOT_WRITTEN)  # the exit status when this fails


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().split()[0]
        return int(text)
    except (OSError, ValueError, IndexError):
        return None


def cgroup_cpu_quota() -> float | None:
    """CPUs allowed by the cgroup's CFS quota (containers limit this way, not by affinity), or None."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]   # cgroup v2
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    quota_v1 = _read_int("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
    period_v1 = _read_int("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
    if quota_v1 and quota_v1 > 0 and period_v1:
        return quota_v1 / period_v1
    return None


def cgroup_memory_limit() -> int | None:
    """The cgroup memory limit in bytes, or None when unlimited/unknown."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        value = _read_int(path)
        if value is not None and value < (1 << 60):
            return value
    return None


def check_cpus(environ: Mapping[str, str]) -> Check:
    from shardprep.job.resources import usable_cpus

    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    slurm = environ.get("SLURM_CPUS_PER_TASK")
    quota = cgroup_cpu_quota()
    usable = usable_cpus()
    details = {"usable": usable, "affinity": affinity, "slurm_cpus_per_task": slurm, "os_cpu_count": os.cpu_count(),
               "cgroup_quota": quota}
    summary = (f"{usable} usable (affinity {affinity}, SLURM_CPUS_PER_TASK {slurm or 'unset'}, "
               f"os.cpu_count {os.cpu_count()}" + (f", cgroup quota {quota:g}" if quota else "") + ")")
    if quota is not None and quota < usable:
        return Check("cpus", WARN, summary + ": the cgroup quota is smaller than the CPUs shardprep will use",
                     f"run with --workers {max(1, int(quota))} (local) or --cpus-per-task {max(1, int(quota))}",
                     details)
    if slurm and slurm.isdigit() and affinity is not None and int(slurm) > affinity:
        return Check("cpus", WARN, summary + ": Slurm allocated more CPUs than this process may run on",
                     "check the site's task binding (srun --cpu-bind) or lower --cpus-per-task", details)
    return Check("cpus", OK, summary, None, details)


def check_memory(usable_cpus: int) -> Check:
    import psutil

    available = psutil.virtual_memory().available
    limit = cgroup_memory_limit()
    effective = min(available, limit) if limit else available
    need = usable_cpus * MEM_PER_TASK
    details = {"available_bytes": available, "cgroup_limit_bytes": limit, "effective_bytes": effective,
               "needed_for_local_executor_bytes": need}
    msg = f"{human_bytes(effective)} available" + (f" (cgroup limit {human_bytes(limit)})" if limit else "")
    if effective < MEM_PER_TASK:
        return Check("memory", FAIL, msg + f": below the ~{human_bytes(MEM_PER_TASK)} one task needs",
                     "free memory, or run on a node with more (sbatch --mem=4G)", details)
    if effective < need:
        workers = max(1, effective // MEM_PER_TASK)
        return Check("memory", WARN, msg + f": the local executor starts {usable_cpus} task processes "
                     f"(~{human_bytes(need)})", f"use --workers {workers}", details)
    return Check("memory", OK, msg, None, details)


def read_striping(path: Path) -> str:
    """``lfs getstripe -d`` of a directory (its default layout)."""
    from shardprep.storage.lustre import read_layout

    return read_layout(path)


def check_filesystem(output: Path, *, detect: Callable[[Path], bool] | None = None) -> Check:
    """Lustre or not (statfs magic), the mount, and on Lustre the current default striping."""
    from shardprep.storage.lustre import detect_lustre
    from shardprep.storage.mounts import mount_for, read_mount_table

    probe = existing_ancestor(output)
    mount = mount_for(os.path.realpath(probe), read_mount_table())
    lustre = (detect or detect_lustre)(probe)
    details: dict[str, Any] = {"path": str(probe), "lustre": lustre, "fstype": mount.fstype if mount else None,
                               "mountpoint": mount.mountpoint if mount else None, "lfs": shutil.which("lfs"),
                               "striping": None}
    where = f"{probe} is on {mount.fstype if mount else 'an unknown file system'}" + \
            (f" (mounted at {mount.mountpoint})" if mount else "")
    if not lustre:
        if mount and mount.fstype in ("tmpfs", "overlay", "ramfs"):
            return Check("filesystem", WARN, where + ": not shared with other nodes, and lost on reboot",
                         "fine for --executor local; for Slurm put --output on the shared file system", details)
        return Check("filesystem", OK, where + " (not Lustre: striping does not apply)", None, details)
    if details["lfs"] is None:
        return Check("filesystem", WARN, f"{probe} is on Lustre but `lfs` is not on PATH: shards get the inherited "
                     "layout", "load the Lustre client tools (e.g. `module load lustre`) so submit can stripe "
                     "the output directory", details)
    try:
        details["striping"] = read_striping(probe)
    except EnvironmentProblem as e:
        return Check("filesystem", WARN, f"{probe} is on Lustre, but reading its striping failed: {e}",
                     "check `lfs getstripe -d` by hand; submit's setstripe will fail the same way", details)
    layout = " ".join(details["striping"].split())
    note = "submit sets the progressive layout on a new, empty --output" if probe != Path(os.path.abspath(output)) \
        or not any(Path(output).iterdir()) else "the directory has files: submit keeps its layout"
    return Check("filesystem", OK, f"{probe} is on Lustre; current default striping: {layout[:160]}; {note}",
                 None, details)


def check_write_permission(output: Path) -> Check:
    """Create (and remove) a file where the shards will go: the only test that sees ACLs, quotas and
    read-only mounts the way the job will."""
    output = Path(output)
    if output.exists() and not output.is_dir():
        return Check("write_permission", FAIL, f"--output {output} exists and is not a directory",
                     "choose a directory path for --output")
    probe = existing_ancestor(output)
    details = {"probed": str(probe), "output_exists": output.exists()}
    try:
        if not probe.is_dir():
            raise NotADirectoryError(f"{probe} is not a directory")
        if probe == Path(os.path.abspath(output)):
            fd, name = tempfile.mkstemp(prefix=".shardprep-doctor-", dir=probe)
            os.close(fd)
            os.unlink(name)
        else:
            os.rmdir(tempfile.mkdtemp(prefix=".shardprep-doctor-", dir=probe))
    except OSError as e:
        return Check("write_permission", FAIL, f"cannot create files in {probe}: {e.strerror or e}",
                     f"choose an --output you can write to, or fix the permissions of {probe}", details)
    what = "can write into" if probe == Path(os.path.abspath(output)) else f"{output} does not exist yet; can create it in"
    return Check("write_permission", OK, f"{what} {probe}", None, details)


def check_slurm(executor: str | None, n_tasks: int | None) -> Check:
    """sbatch/squeue reachable and MaxArraySize.  Problems fail only when a Slurm executor was named."""
    from shardprep.executor.slurm.commands import max_array_size, run_checked

    needed = executor in ("slurm", "submitit")
    bad = FAIL if needed else WARN
    tools = {t: shutil.which(t) for t in ("sbatch", "squeue", "scontrol")}
    details: dict[str, Any] = {"tools": tools, "reachable": False, "max_array_size": None, "version": None}
    if not tools["sbatch"] or not tools["squeue"]:
        missing = ", ".join(t for t in ("sbatch", "squeue") if not tools[t])
        return Check("slurm", bad, f"{missing} not on PATH: only --executor local can run here",
                     "run on a Slurm login node (or `module load slurm`), or use --executor local", details)
    try:
        details["version"] = run_checked(["sbatch", "--version"]).strip()
        run_checked(["squeue", "--noheader", "--format=%i", f"--user={os.getuid()}"])
        details["reachable"] = True
    except EnvironmentProblem as e:
        return Check("slurm", bad, f"Slurm controller not reachable: {e}",
                     "check `sinfo`/`scontrol ping` (is slurmctld up, munge running?), or use --executor local",
                     details)
    size, source = max_array_size()
    details.update(max_array_size=size, max_array_size_source=source)
    msg = f"{details['version']}, controller reachable, MaxArraySize {size} ({source})"
    if n_tasks:
        from shardprep.executor.slurm.submission import SubmissionPlan

        arrays = len(SubmissionPlan.build(range(n_tasks), max_array_size=size).arrays)
        details["planned_tasks"] = n_tasks
        msg += f"; {n_tasks} task(s) -> {arrays} array job(s)"
    return Check("slurm", OK, msg, None, details)


def check_environment(environ: Mapping[str, str]) -> Check:
    shown = {k: environ.get(k) for k in ENV_SHOWN}
    secrets = {k: ("set" if environ.get(k) else "unset") for k in ENV_SECRET}
    details = {"variables": shown, "secrets": secrets}
    notes = []
    if environ.get("RAYON_NUM_THREADS") or environ.get("TOKENIZERS_PARALLELISM"):
        notes.append("RAYON_NUM_THREADS/TOKENIZERS_PARALLELISM are reset per task from its CPU count")
    if environ.get("AWS_REGION") and not environ.get("AWS_DEFAULT_REGION") and not environ.get("AWS_PROFILE"):
        return Check("environment", WARN, "AWS_REGION is set but boto3 takes the region from AWS_DEFAULT_REGION "
                     "or the profile", f"export AWS_DEFAULT_REGION={environ['AWS_REGION']}", details)
    if (environ.get("AWS_ACCESS_KEY_ID") is None) != (environ.get("AWS_SECRET_ACCESS_KEY") is None):
        return Check("environment", WARN, "only one of AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY is set",
                     "set both, or neither and use AWS_PROFILE", details)
    set_names = [k for k, v in shown.items() if v] + [k for k, v in secrets.items() if v == "set"]
    return Check("environment", OK, (", ".join(set_names) or "none of the relevant variables") + " set" +
                 (f"; {'; '.join(notes)}" if notes else ""), None, details)


def _requirements() -> list[tuple[str, str | None, bool]]:
    """(distribution, minimum version, required) from shardprep's installed metadata."""
    out = []
    try:
        from packaging.requirements import Requirement

        for text in metadata.requires("shardprep") or []:
            req = Requirement(text)
            if req.marker is None or req.name in OPTIONAL_PACKAGES:
                minimum = next((s.version for s in req.specifier if s.operator == ">="), None)
                out.append((req.name, minimum, req.marker is None))
    except (metadata.PackageNotFoundError, ImportError):
        for name in ("tokenizers", "numpy", "pyarrow", "orjson"):
            out.append((name, None, True))
    return list({name: (name, m, r) for name, m, r in out}.values())


def check_versions() -> Check:
    from shardprep import __version__

    versions: dict[str, str | None] = {"python": sys.version.split()[0], "shardprep": __version__}
    missing: list[str] = []
    old: list[str] = []
    for name, minimum, required in _requirements():
        try:
            installed = versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
            if required:
                missing.append(f"{name} is not installed")
            continue
        if minimum:
            from packaging.version import Version

            if Version(installed) < Version(minimum):
                old.append(f"{name} {installed} is older than {minimum}")
    details = {"versions": versions, "missing": missing, "older_than_required": old}
    if missing:
        return Check("versions", FAIL, "; ".join(missing + old), "pip install shardprep (or the named packages)",
                     details)
    if old:
        return Check("versions", WARN, "; ".join(old) + " (declared minimum; may still work)",
                     "pip install -U " + " ".join(o.split()[0] for o in old), details)
    key = ("tokenizers", "datasets", "pyarrow", "gigatoken", "torch")
    return Check("versions", OK, ", ".join(f"{k} {versions.get(k) or 'not installed'}" for k in key),
                 None, details)

