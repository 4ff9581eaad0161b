"""Lustre detection (on sample mount tables) and striping with a stand-in ``lfs`` on PATH."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import pytest

from shardprep.cli.plan import add_stripe_arguments, stripe_layout_from_args
from shardprep.errors import ConfigError, EnvironmentProblem
from shardprep.storage import lustre
from shardprep.storage.lustre import (
    DEFAULT_SHARD_LAYOUT,
    LUSTRE_SUPER_MAGIC,
    STAGED_INPUT_LAYOUT,
    StripeLayout,
    is_lustre,
    prepare_output_dir,
)
from shardprep.storage.mounts import mount_for, parse_mounts

sys.path.insert(0, str(Path(__file__).parents[1] / "fixtures"))
from fake_lfs import install as install_fake_lfs  # noqa: E402

FSX_MOUNTS = """\
sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
/dev/nvme0n1p1 / xfs rw,noatime,attr2,inode64 0 0
10.0.0.1@tcp:/abcdef /fsx lustre rw,seclabel,flock,lazystatfs,encrypt 0 0
tmpfs /fsx/scratch tmpfs rw,nosuid,nodev 0 0
/dev/nvme1n1 /fsxdata ext4 rw,relatime 0 0
192.168.1.5@o2ib:192.168.1.6@o2ib:/lustre /mnt/with\\040space lustre rw,flock 0 0
"""


# ----------------------------------------------------------------------------------------- detection

def test_parse_mounts_reads_fields_and_unescapes_octal():
    entries = parse_mounts(FSX_MOUNTS + "garbage\n\n")
    assert len(entries) == 7
    fsx = entries[3]
    assert (fsx.device, fsx.mountpoint, fsx.fstype) == ("10.0.0.1@tcp:/abcdef", "/fsx", "lustre")
    assert "flock" in fsx.options
    assert entries[6].mountpoint == "/mnt/with space"


@pytest.mark.parametrize("path,expected", [
    ("/fsx", True),
    ("/fsx/raw/data", True),
    ("/fsx/scratch/x", False),        # a tmpfs stacked inside the Lustre mount
    ("/fsxdata/shards", False),       # a name that merely starts with "fsx"
    ("/home/user/fsx", False),        # path names prove nothing
    ("/mnt/with space/out", True),
    ("/", False),
])
def test_mount_table_decides_by_longest_mount_point(path, expected):
    mount = mount_for(path, parse_mounts(FSX_MOUNTS))
    assert mount is not None
    assert is_lustre(None, mount) is expected


def test_statfs_magic_wins_over_the_mount_table():
    lustre_mount = mount_for("/fsx/a", parse_mounts(FSX_MOUNTS))
    ext4_magic = 0xEF53
    assert is_lustre(LUSTRE_SUPER_MAGIC, None) is True
    assert is_lustre(ext4_magic, lustre_mount) is False
    assert is_lustre(None, None) is False


def test_statfs_magic_of_this_machine_is_a_real_number(tmp_path):
    magic = lustre.statfs_magic(tmp_path)
    assert isinstance(magic, int) and magic not in (0, LUSTRE_SUPER_MAGIC)
    assert lustre.detect_lustre(tmp_path / "does" / "not" / "exist") is False
    assert lustre.statfs_magic(tmp_path / "missing") is None


# ---------------------------------------------------------------------------------------- layouts

def _layout(*argv: str, default: StripeLayout = DEFAULT_SHARD_LAYOUT) -> StripeLayout | None:
    """The layout ``argv`` asks for, through the CLI's striping options."""
    p = argparse.ArgumentParser()
    add_stripe_arguments(p, default=default)
    return stripe_layout_from_args(p.parse_args(list(argv)), default=default)


def test_default_layout_is_the_progressive_one():
    assert _layout() == DEFAULT_SHARD_LAYOUT
    assert _layout(default=STAGED_INPUT_LAYOUT) == STAGED_INPUT_LAYOUT     # what `stage` passes
    assert DEFAULT_SHARD_LAYOUT.command(Path("/fsx/out")) == [
        "lfs", "setstripe", "-E", "128M", "-c", "1", "-S", "1M", "-E", "4G", "-c", "4", "-S", "1M",
        "-E", "-1", "-c", "8", "-S", "1M", "/fsx/out"]
    assert STAGED_INPUT_LAYOUT.command(Path("/d")) == ["lfs", "setstripe", "-c", "1", "-S", "1M", "/d"]


def test_layout_options():
    assert _layout("--stripe-count", "16", "--stripe-size", "4M").args == (
        "-c", "16", "-S", "4M")
    assert _layout("--stripe-count", "-1").args == ("-c", "-1")
    raw = _layout("--stripe-layout", "-E 256M -c 1 -E -1 -c 16 -S 4M")
    assert raw.args == ("-E", "256M", "-c", "1", "-E", "-1", "-c", "16", "-S", "4M")
    assert _layout("--no-stripe") is None


@pytest.mark.parametrize("argv,needle", [
    (["--stripe-size", "100K"], "multiple of 64K"),
    (["--stripe-size", "lots"], "--stripe-size 'lots'"),
    (["--stripe-count", "-3"], "--stripe-count -3"),
    (["--stripe-layout=-d"], "'-d' is not a layout option"),
    (["--stripe-layout", "-c 4 /etc"], "'/etc' is not a layout option"),
    (["--stripe-layout=-c"], "needs a value"),
    (["--stripe-layout", "-c 2", "--stripe-count", "4"], "cannot be combined"),
    (["--no-stripe", "--stripe-count", "4"], "cannot be combined"),
])
def test_bad_layout_options_name_the_option(argv, needle):
    with pytest.raises(ConfigError) as e:
        _layout(*argv)
    assert needle in str(e.value)


# ------------------------------------------------------------------------------------ applying (fake lfs)

@pytest.fixture
def fake_lfs(tmp_path, monkeypatch):
    """A recording ``lfs`` on PATH; returns a function that reads the recorded argv lists."""
    return install_fake_lfs(tmp_path, monkeypatch)


def _on_lustre(_path: Path) -> bool:
    return True


def test_default_layout_applied_and_read_back(tmp_path, fake_lfs):
    out = tmp_path / "out"
    record = prepare_output_dir(out, DEFAULT_SHARD_LAYOUT, detect=_on_lustre)
    assert out.is_dir() and not any(out.iterdir())
    assert fake_lfs() == [
        ["setstripe", "-E", "128M", "-c", "1", "-S", "1M", "-E", "4G", "-c", "4", "-S", "1M",
         "-E", "-1", "-c", "8", "-S", "1M", str(out)],
        ["getstripe", "-d", str(out)],
    ]
    assert record["filesystem"] == "lustre"
    assert record["command"][:2] == ["lfs", "setstripe"] and record["command"][-1] == str(out)
    assert "lcme_extent.e_end:   134217728" in record["applied"]
    assert "lcme_extent.e_end:   EOF" in record["applied"]
    assert "stripe_count:  8" in record["applied"]
    json.dumps(record)  # recordable in job.json


def test_custom_layout_applied_to_existing_empty_dir(tmp_path, fake_lfs):
    out = tmp_path / "empty"
    out.mkdir()
    record = prepare_output_dir(out, StripeLayout.plain(16, "4M"), detect=_on_lustre)
    assert fake_lfs()[0] == ["setstripe", "-c", "16", "-S", "4M", str(out)]
    assert record["applied"].startswith("stripe_count:  16 stripe_size:   4194304")


def test_non_empty_directory_is_left_alone_but_read_back(tmp_path, fake_lfs):
    out = tmp_path / "used"
    out.mkdir()
    (out / "job.json").write_text("{}")
    record = prepare_output_dir(out, DEFAULT_SHARD_LAYOUT, detect=_on_lustre)
    assert fake_lfs() == [["getstripe", "-d", str(out)]]
    assert record["command"] is None and "non-empty" in record["note"]


def test_not_lustre_skips_striping_and_says_so_once(tmp_path, fake_lfs, caplog, monkeypatch):
    monkeypatch.setattr(lustre, "_said_not_lustre", False)
    caplog.set_level(logging.INFO, logger="shardprep.storage.lustre")
    a = prepare_output_dir(tmp_path / "a", DEFAULT_SHARD_LAYOUT)   # real detection: not Lustre here
    b = prepare_output_dir(tmp_path / "b", DEFAULT_SHARD_LAYOUT)
    assert a == b == {"filesystem": "other", "applied": None, "command": None}
    assert (tmp_path / "a").is_dir() and (tmp_path / "b").is_dir()
    assert fake_lfs() == []
    assert sum("striping is skipped" in r.getMessage() for r in caplog.records) == 1


def test_no_stripe_records_nothing(tmp_path, fake_lfs):
    assert prepare_output_dir(tmp_path / "x", None, detect=_on_lustre) is None
    assert (tmp_path / "x").is_dir() and fake_lfs() == []


def test_a_file_in_the_way_is_a_config_error(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        prepare_output_dir(tmp_path / "f", DEFAULT_SHARD_LAYOUT, detect=_on_lustre)


def test_lustre_without_lfs_warns(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    caplog.set_level(logging.WARNING, logger="shardprep.storage.lustre")
    record = prepare_output_dir(tmp_path / "out", DEFAULT_SHARD_LAYOUT, detect=_on_lustre)
    assert record == {"filesystem": "lustre", "applied": None, "command": None, "note": "lfs not found"}
    assert any("`lfs` is not on PATH" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("failing", ["setstripe", "getstripe"])
def test_lfs_failure_names_the_command_and_its_stderr(tmp_path, fake_lfs, monkeypatch, failing):
    monkeypatch.setenv("FAKE_LFS_FAIL", failing)
    monkeypatch.setenv("FAKE_LFS_STDERR", "error: setstripe: invalid layout: Operation not permitted (1)")
    monkeypatch.setenv("FAKE_LFS_EXIT", "22")
    out = tmp_path / "out"
    with pytest.raises(EnvironmentProblem) as e:
        prepare_output_dir(out, DEFAULT_SHARD_LAYOUT, detect=_on_lustre)
    msg = str(e.value)
    assert f"`lfs {failing} " in msg and str(out) in msg
    assert "exit code 22" in msg and "Operation not permitted (1)" in msg
    assert e.value.exit_code == 8
