"""The on-disk bytes of a job are pinned: sha256 of every file it writes, from a fixed corpus.

Why: refactors of the records (issue 11, issue 16) must not change a byte of shards, sidecars or
index.json.  Each case plans, runs every task and finalizes through the Python API, then hashes every
file of the output directory.

What is fixed instead of normalised: the corpus, the tokenizers and the output are written under one
fixed directory (``/tmp/shardprep-format-pinned-<uid>``, serialised between concurrent runs with a lock)
and every input gets a fixed mtime, so paths, mtimes and therefore the plan fingerprint are pinned too.

What is normalised (byte-level substitution in the JSON text, nothing is re-serialised):
- ``"created_by": "shardprep X.Y.Z"`` in job.json, sidecars and index.json (the release string);
- the sidecars' ``"backend"`` object (library versions and the auto check's report) and ``"stats"``
  object (elapsed time, rate, threads, peak RSS, host, Slurm job id);
- job.json's ``"backend_check"`` object (the plan-time hard-case check: library versions, issue 12).
Not hashed: ``logs/`` (timestamps).  The pins hold for the ``tokenizers`` version they were recorded
with (the frozen tokenizer.json is its serialisation, and the demo tokenizer is trained with it); on
another version the test skips and says how to re-record them (``SHARDPREP_PRINT_PINS=1``).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from shardprep.api import plan_job
from shardprep.demo_data import build_sample_tokenizer, write_sample_corpus
from shardprep.job.finalize import finalize
from shardprep.job.options import PlanOptions, TokenizeOptions
from shardprep.job.state import job_state
from shardprep.job.task import run_task

from conftest import SHARED

PIN_ROOT = Path(tempfile.gettempdir()) / f"shardprep-format-pinned-{os.getuid()}"
MTIME_NS = 1_700_000_000_123_456_789
PINNED_TOKENIZERS = "0.23.3"

_NORMALISE = [
    (re.compile(rb'"created_by": "[^"]*"'), b'"created_by": "<created_by>"'),
    (re.compile(rb'"backend": \{.*?\n  \}', re.S), b'"backend": <backend>'),
    (re.compile(rb'"stats": \{.*?\n  \}', re.S), b'"stats": <stats>'),
    (re.compile(rb'"backend_check": \{.*?\n  \}', re.S), b'"backend_check": <backend_check>'),
]

# case -> (tokenizer source, TokenizeOptions kwargs, target_task_bytes)
CASES = {
    "demo-pack": ("demo", dict(chunk_tokens=2048), 24 << 10),
    "demo-doc-bos": ("demo", dict(layout="doc", add_bos=True, bos_token="<|pad|>", backend="hf"), None),
    "gpt2-pack": ("gpt2", dict(chunk_tokens=4096, backend="hf"), 64 << 10),
    "cl100k-doc-u32": ("bpe-bytelevel-100k-cl100k-dolma2", dict(layout="doc", backend="hf"), None),
}

# Recorded on main before the issue 11 records refactor (tokenizers 0.23.3).  Issue 16 (plan format 2)
# deliberately re-pinned job.json and added plan/tasks.jsonl and plan/tasks.idx; every other pin
# (shards, sidecars with their plan_fingerprint, index.json, tokenizer.json) is unchanged since main.
# Issue 12 deliberately re-pinned: every job.json (the ``sizing`` record; an ``auto`` plan's plan-time
# hard-case check ``backend_check`` is normalised above), and all of demo-pack, whose 24 KiB target now
# packs its small files differently (packs of half the target to the target, a small leftover joining
# the task before it): a different task assignment, not a different format.  The other three cases'
# shards, sidecars and index.json are unchanged since main.
PINS: dict[str, dict[str, str]] = {
    'cl100k-doc-u32': {
        'index.json': 'f2080dc6e7871b3818bd18f4e18e80dd951501f4a2f79db90058440e338a241e',
        'job.json': 'e3c2639c58218daf69de2f88008d21936dfaaa2722986f521424e3b73231e273',
        'plan/tasks.idx': 'cbc58fdc6b8764604ef8386bef81b9a9b1aef04492f756974e74e4f05ab8741f',
        'plan/tasks.jsonl': '52d7e7da22206f83ae904b109471d401b601688e8b14262af4bbd253703872e3',
        'shard-00000.json': 'df423cf2d82a3dfeb4728f99d29d328339aa4910056ee41fd2aec3abfc2ba50c',
        'shard-00000.tar': 'd8160690107b71f63be5f9387815a8fc57a8a89e2d9b942094dee2abc0f34815',
        'shard-00001.json': '43d8fc44e3b913307aa20007f87f94f8896e9a43426389f9af99b59efa6fb636',
        'shard-00001.tar': 'd7334d4d7d5b1ecc3c4e0a950a4db3b3e0fd92277a6860ba07231df049dfc965',
        'shard-00002.json': '28d8961a6413d68682bb99d9536f856b82b98735eccdb87e4962115feced081f',
        'shard-00002.tar': 'c664b5812c6531afe595a51c5e2eb1188cbc82b11f851464a9d11ffdd92df45e',
        'shard-00003.json': '8b2ac60d2f450ee572268cfd8707967027f92366b529351c8cb35417c1904fbc',
        'shard-00003.tar': 'ab229ec4368a446d1198405caf2c865b12bafcac811be7c794adf475a9401fdb',
        'shard-00004.json': 'faf8fb4d494e0e67be7f78ff7eb84e20fcdaf8cf8183e3a9aa44d735113558e2',
        'shard-00004.tar': '0526e7be914b9c73291ac589ec351b86e7c3206df50302d157a0012609fd19e5',
        'shard-00005.json': '8e703de05633d66e2495b87059575a13105d71f0a3b83e24608a3485a9558fb3',
        'shard-00005.tar': 'fbad176b65bd424be785843834bb6cad53e1d426d1709965bdf879a894e2aae2',
        'shard-00006.json': '8d1f20560b0d44b44d66e0c6c55bed3c1bacb1a00fe8bab697a8a626e27f9d69',
        'shard-00006.tar': '0ed5394cda6a7b5755989359c7bfefc8783a8b86bb9b7551028ae5d67688f0f1',
        'shard-00007.json': 'e1c55e697895449c002cd96bd5045a37ea8d4ec1e4edca1b0b24f2072872c30d',
        'shard-00007.tar': 'c9d80adf8b4b6aa5e2bd5689b43b0e6876868d66366c3b729ac90aac6e0a870e',
        'tokenizer.json': 'bd584f75d898c25b0e6dbbe89271851afd87a7c1de7f4ca4ec9f74d7e1187d00',
    },
    'demo-doc-bos': {
        'index.json': 'f8a63d9c6191ca3de75fda8233f617eb29f0524bf638f08f569edce1d65bd926',
        'job.json': 'b88066916ba36951802a132ba8fe9d97549e68493e7e822e434d85cb032a76ca',
        'plan/tasks.idx': 'cbc58fdc6b8764604ef8386bef81b9a9b1aef04492f756974e74e4f05ab8741f',
        'plan/tasks.jsonl': '52d7e7da22206f83ae904b109471d401b601688e8b14262af4bbd253703872e3',
        'shard-00000.json': 'd512d23469fd7e81180def66548c384c6257a02b2193c48d0c5e9b0b362db78b',
        'shard-00000.tar': '271e04f8fcc4390f47ae84310c67719b8d005bfb51825274416d2e6d261ff91a',
        'shard-00001.json': 'eac28f95080d11addd923280c4c6d0c0bbea9ff1b53883394a42cd679889ea81',
        'shard-00001.tar': 'e8330527c7493dba373ac54f16b0edd796448633aa62f5abc65863e9cb410cab',
        'shard-00002.json': '9eaf90fb1b0eec0b836ed42ca3f3ab28b276aa96c6bdca0e775b0e2852b9f749',
        'shard-00002.tar': '635edbd745ccc56ba4570c9c14a9c2c8b2fb5f90b05e6cbc3dc131f45511018b',
        'shard-00003.json': 'e038206ac4da6eff863215178fbe3f80b292ec088c28c5ef3b15629bad64b218',
        'shard-00003.tar': 'a2c0aed6235904c80032ae3820b2b53f94072e1b45486ce1043a6edaf91de72e',
        'shard-00004.json': 'a51b76fa27ae629d5703cc8c3f6e42fc05bf1d0dc373c18ecc411427a6d48a17',
        'shard-00004.tar': 'e53ce3a7f2d53dd6d0c4cbe3fd46a105b8854f0aea55455aaed5ef652d0d7987',
        'shard-00005.json': 'd86baee2b2d8f073f2f6e7ad150340f40cdaa7acdc4b4e2cb2d711b42729caa4',
        'shard-00005.tar': '5e8fa5a911ad0fa719221a700d0c79b3fa1a71185f9a92effde0e0f0bf8f861a',
        'shard-00006.json': 'f8db428491d5ab9a865a260b0aeee258c90d99a19660ad9250b9a95b60326b9c',
        'shard-00006.tar': 'f766fc2a9863d79277b164f90f2e1d38934ad6b39cab5aff6eecf638e1589925',
        'shard-00007.json': '51ef11d5743d883f4dd2385c02782513dbafd41ee100421087b446958a5a3ff8',
        'shard-00007.tar': '52922265766c73507922dc6dcbbbd8de3de433c63ccdc3da815bfb7fb1240275',
        'tokenizer.json': '81c122a4decbba9837c79b9395bbea32a68642f24871969bf3f7a66531256c2f',
    },
    'demo-pack': {
        'index.json': '7a4c83747c6d280e709985cd0031ed77c981225501cb23bead3aa043ca2cff7b',
        'job.json': 'd830b4597ac437510131e4d60d0760abf779c2b5fcd24ecf9dc193ebc6e2ff14',
        'plan/tasks.idx': '408153212de493c6adc33f7368aff1d28f7790d0b438a1caf18bff323bc55d14',
        'plan/tasks.jsonl': '6ef266e5e743ac6db39afd7b285601a714f51221abaccff58e21ac4664655582',
        'shard-00000.json': 'b359b3d48126c9c831b67e3da5ae624d5edec4ec9a59ff6a61d3184151a354c4',
        'shard-00000.tar': '8cc9ac9cfab381990e9a8e5d563909fb68e2ef22535d7f31f104b19c11007716',
        'shard-00001.json': '7310aa56e472f54a07c76c2992ccc47bcd5b4cb4c3d1797718468732d9445f41',
        'shard-00001.tar': '1cf7310da05b925057e2ec42958b46308bf44227daacee9f01b850760e062249',
        'shard-00002.json': 'e8010c2d4c02ed0c4777b3c2e98085113dff03e84358aa3bf7a19149247a1553',
        'shard-00002.tar': 'de32594544d4f6fc3bbf3681886188f376eb833ad2bc8c6b8beae03cb4d64c56',
        'shard-00003.json': '69644df71c4ef5913d0bcc2f1b2ed90a00bfdbc2a71b49decd7495fef9da6b64',
        'shard-00003.tar': 'bb4e9f1f53b4f708712c4c92ee468f5ed34e82ff7f06129bd8325e9b3913914f',
        'shard-00004.json': '38a22c57708cf590036c90682d944303ef2d5c19c3e5d011b5373f92f6a13aa9',
        'shard-00004.tar': '82a1f4fa3e8976ed28383cc56da587024f164ae955aeb76cbd565afdf1fe14c0',
        'shard-00005.json': '2e5f0dc4bf9da3cb7ae8ae9c9af7faa758f22f037839c195c17c67ea427e2910',
        'shard-00005.tar': '2f39a62543dd6c170bfdb585b5d366ec5c5631666a2a9a1039cbe3317c4220ea',
        'shard-00006.json': 'a342716358cefbc28c1e2835c5cfd080aab61671a2a4bc0d9402cfba0e161bc5',
        'shard-00006.tar': '7d43c17e39a8dd9ae9cfee993c973ad293384762203362dfdd2f80f69b19ec43',
        'shard-00007.json': '7e94190e2d21d3542059de2b4f1d6efa713844e9f314dbd6933de2fc26e8e111',
        'shard-00007.tar': '6c90915f9976e5be642a039105c86eb138fc2127185f7ace568d47fccc0dd163',
        'shard-00008.json': '1454c8e62c3f0aa053b268c9c8ba419a0dcdd7a759a438b780a87a58316edc7a',
        'shard-00008.tar': 'af4b8548eb2761c29f3c800b7d9063dc41a2a6cf4dccd636cbc4bce0b62457cf',
        'shard-00009.json': '4c7fd1f60a8a541937309a72177f6566607841e26df1acea9754007312b78fe1',
        'shard-00009.tar': '7207af24c1d23d6b238498eb976cb6175b73ea0f311eb92022b5fa216857ac49',
        'shard-00010.json': 'c120aa729ce6047880dcf54ae8b2ee000ea0ff5097bbc1de8304300834eaf93c',
        'shard-00010.tar': '1a1d507c1182da80a254041d05e7b90a35e28cbdb6bcce61114d0dbae7bb60b7',
        'shard-00011.json': '48dc7e0ec668940d9f05adfd5afd409fb0d16299855e88357a7c06270a139915',
        'shard-00011.tar': '6c9a60cdd65367b213268c71c952fff46cd41a0218b6095f607590ec949cacce',
        'shard-00012.json': 'a354b79e01065e6406b89555f1e001f2a84fdcb80a65353e5acedd72faef00e0',
        'shard-00012.tar': '5e6a0630759c7590df44936e7f1c31c51239122400ecfa2c12328dbb8581c7f2',
        'shard-00013.json': '55481b6e34f8bf1f7d28abbb1e8d8913b18b6ffb4829add786f74c7a8f0b5c41',
        'shard-00013.tar': '9afa20deb916e8a8b4bcc3890777e7de1b5129ddf4087d96dce3e3c18191f153',
        'shard-00014.json': '40ee4dd48c834e0cc9f4c5d955124ce2e8c0149b4745fa500f78bdef275fc23d',
        'shard-00014.tar': 'ab05aac7fd658cbef745cc780f61a99cdc872f8443e96eda98a7ac729dab2c60',
        'shard-00015.json': 'f4a5c503451b98e58d4139ffae50cbee9fb326e0a280b219d2f8ba0b42d910cc',
        'shard-00015.tar': '673cbebccd14217ec1fbeb615ef2adf1b18463c73dfa5ee9e72d5fb4411c104a',
        'shard-00016.json': '698d86377dcaa161686afa8766e2da1de1433c9adfc31f1ead51fcbb0f08c0f8',
        'shard-00016.tar': '4971fa621a03b02c5c217fa3714ad64484e77644a4ac245ebd1fa4d3a67ea730',
        'tokenizer.json': '81c122a4decbba9837c79b9395bbea32a68642f24871969bf3f7a66531256c2f',
    },
    'gpt2-pack': {
        'index.json': '0328268559d361c69529da2fc37ef1279a35e15a778910802beed487c27ec376',
        'job.json': '7313c34a3f8ee50507914e5f27d55ad2f26cfc6524f632ff2424aa4d30bdfe5f',
        'plan/tasks.idx': '533a5cb5408874220b7c527ebbf1adf4b43fb42d6b9376892853836457f724b6',
        'plan/tasks.jsonl': 'f8c3b826da5934325b2d309e40dc5f7468cb0cf7e691db7ce119f36b1b6ce410',
        'shard-00000.json': 'f61245bdf5804324f8a8bc35dbec70320f02e6ee734589974d6148ea48530827',
        'shard-00000.tar': '7021be50b927a690e877e978647b70dcf89060d6d53c4fd2973be94ea402fe28',
        'shard-00001.json': '1b085bfff1d58c94434285a9342cf3aaa4c489dc125acf2cbd5d33f161edab92',
        'shard-00001.tar': '4d7c4b7c5a8ef8a75ef14944176c4deb238daa78050422927640de11ef78a91f',
        'shard-00002.json': '2b49fff023977e78df5244ec266570966df13b555945bd94b7088525d2847f03',
        'shard-00002.tar': 'eb6ee1b054ef9097646f37889a9bb0a2c126fc7045380db6654ca314725594fd',
        'shard-00003.json': '62b4809ecc4f9fee7142c02b86056695a9d182832272a7547e90c63525d1a406',
        'shard-00003.tar': '274f987c30d80296e7df3eeb0a347e43ad60ef895587ae246e5a6931726cbe27',
        'shard-00004.json': 'a1975f286f3d5c55ed01ab9b5148a59f0b870ca78667ef457dcc214caac2a347',
        'shard-00004.tar': '8ace4abc548856bb14bbda1d7c9ec3b2f68adc8d3c9cd74cf2776355255d155f',
        'shard-00005.json': '9b81c9032b6a43ee135b1805e265f18c752b4232f1b12b32f004a71b6c470bbc',
        'shard-00005.tar': '5572b4219abe07597c7ac0809967771e9d45cbba9092c226b003a68ab82f2dbb',
        'shard-00006.json': 'a94e622e1c9d41245ce42cacc52626e864f7b957c348ddc0496c92659cc2d262',
        'shard-00006.tar': '98a36fa22c141c7febcdd79a62f0f711fb6dfc4fd0b411955ee09c4bdf16de27',
        'tokenizer.json': '11e818f948f43497f364722def50c13f419158554961ee4bb095fbd3350895c3',
    },
}


def _lock():
    PIN_ROOT.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(str(PIN_ROOT) + ".lock", os.O_CREAT | os.O_RDWR, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _corpus(root: Path) -> Path:
    corpus = write_sample_corpus(root / "corpus", files=6, docs_per_file=150, seed=11)
    # bad input the sidecars count and cite: empty line, malformed JSON, missing field, not an object
    (corpus / "bad.jsonl").write_text('{"text": "fine document"}\n\n{"text": \n{"body": "x"}\n[1, 2]\n'
                                      '{"text": "last \\u00e9 one"}\n', encoding="utf-8")
    (corpus / "big.txt").write_text("\n".join(f"line {i} of the big file, long enough to be split"
                                              for i in range(3000)) + "\n", encoding="utf-8")
    for p in corpus.iterdir():
        os.utime(p, ns=(MTIME_NS, MTIME_NS))
    return corpus


def _tokenizer(root: Path, which: str) -> Path:
    dest = root / "tokenizers" / which / "tokenizer.json"
    if which == "demo":
        return build_sample_tokenizer(dest)
    src = SHARED / "tokenizers" / which / "tokenizer.json"
    if not src.is_file():
        pytest.skip(f"shared tokenizer {src} not present")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    return dest


def _run_job(corpus: Path, out: Path, tokenizer: Path, options: dict, target: int | None) -> None:
    plan_job([corpus], out, tokenizer, TokenizeOptions(**options), PlanOptions(target, one_file_per_task=target is None))
    for t in job_state(out).missing:
        run_task(out, t, threads=1)
    finalize(out)


def _hashes(out: Path) -> dict[str, str]:
    found = {}
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out).as_posix()
        if p.is_dir() or rel.startswith("logs/"):
            continue
        data = p.read_bytes()
        if p.suffix == ".json" and p.name != "tokenizer.json":
            for pattern, repl in _NORMALISE:
                data = pattern.sub(repl, data)
        found[rel] = hashlib.sha256(data).hexdigest()
    return found


@pytest.fixture()
def pin_root():
    fd = _lock()
    try:
        shutil.rmtree(PIN_ROOT, ignore_errors=True)
        PIN_ROOT.mkdir(parents=True)
        yield PIN_ROOT
    finally:
        shutil.rmtree(PIN_ROOT, ignore_errors=True)
        os.close(fd)


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_output_bytes_are_pinned(case, pin_root):
    import tokenizers

    which, options, target = CASES[case]
    tokenizer = _tokenizer(pin_root, which)
    out = pin_root / "out" / case
    _run_job(_corpus(pin_root), out, tokenizer, options, target)
    got = _hashes(out)
    if os.environ.get("SHARDPREP_PRINT_PINS"):
        print(f"\n    {case!r}: {{\n" + "".join(f"        {k!r}: {v!r},\n" for k, v in got.items()) + "    },")
    if tokenizers.__version__ != PINNED_TOKENIZERS:
        pytest.skip(f"pins were recorded with tokenizers {PINNED_TOKENIZERS}, this is {tokenizers.__version__}: "
                    f"re-record them with SHARDPREP_PRINT_PINS=1 pytest -s {__file__}")
    want = PINS[case]
    changed = sorted(k for k in set(want) | set(got) if got.get(k) != want.get(k))
    assert not changed, f"{case}: bytes changed (or files appeared/disappeared): {changed}"
