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
from conftest import SHARED

from shardprep.api import plan_job
from shardprep.demo_data import build_sample_tokenizer, write_sample_corpus
from shardprep.job.finalize import finalize
from shardprep.job.options import PlanOptions, TokenizeOptions
from shardprep.job.state import job_state
from shardprep.job.task import run_task

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
# hard-case check ``backend_check`` is normalised above), and all of demo-pack and gpt2-pack, whose
# targets now pack and cut differently (packs of half the target to the target, a small leftover joining
# the task before it, no piece but a file's last under half a step): a different task assignment, not a
# different format.  The other two cases' shards, sidecars and index.json are unchanged since main.
# Issue 23 deliberately re-pinned every job.json, and only job.json: it ends in a ``seal`` (the digests of
# the header sections a hand edit must not change unnoticed); shards, sidecars, index.json and plan/ are
# unchanged.
# Issue 31 deliberately re-pinned every job.json, and only job.json: plan format 3 (``"format_version": 3``,
# sealed), so a plan that lost its seal is refused instead of read as one written before the seal.
PINS: dict[str, dict[str, str]] = {
    'cl100k-doc-u32': {
        'index.json': 'f2080dc6e7871b3818bd18f4e18e80dd951501f4a2f79db90058440e338a241e',
        'job.json': '2d9c5a5eb61b1d7a6345f724ab4b17d0cad6499b877120a515efa89bf47a4d70',
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
        'job.json': '283e7645491235cd2c378a9f44e7fb933444459b3d7bb61ba8cee2082bfbf148',
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
        'index.json': '5329778b06f0fbbbf6ec627b4429cbf25d3c0457d7ee82e5c70d7f4b6c6bfbc8',
        'job.json': '65240adc22ff7d4504ce17b55087f7712cb9f716e61e1cb7d3c7a6a63b7697d3',
        'plan/tasks.idx': '674598082f7ae0afa0c2c37bc4b0fc46a0e98a3fbbfcd0e217b38bb2d06b5f1f',
        'plan/tasks.jsonl': 'b3053c70a3ad731dc0be176fd0f151e25e7384721b894d0b738fa15c5a79512f',
        'shard-00000.json': '2489715ad2292d2b5927c5e76ac115a821a1723579010ac57f1d20b561b976ee',
        'shard-00000.tar': 'b9c84489a5a12f2adb62488cbb01d1f0562625e93c8bbc022ced845ccabdd9c5',
        'shard-00001.json': '0fac99b6e8c27318118557e010c0d7f17019e73f22cf9257a1f6c3b31e51653f',
        'shard-00001.tar': '1cf7310da05b925057e2ec42958b46308bf44227daacee9f01b850760e062249',
        'shard-00002.json': '831aec1b1d4f9309fbce4c76903c4cb09cf115ff6e0b9bf4d512764bf8d0fef8',
        'shard-00002.tar': 'de32594544d4f6fc3bbf3681886188f376eb833ad2bc8c6b8beae03cb4d64c56',
        'shard-00003.json': '9afd5951292604f8d0d0baba661e87eba2c49a04981eb0499fddae7e6ba18f55',
        'shard-00003.tar': 'bb4e9f1f53b4f708712c4c92ee468f5ed34e82ff7f06129bd8325e9b3913914f',
        'shard-00004.json': '0b527d67d85021b4ab78efdec40aad3c67be760f898e72ff35840a54f7582881',
        'shard-00004.tar': '82a1f4fa3e8976ed28383cc56da587024f164ae955aeb76cbd565afdf1fe14c0',
        'shard-00005.json': '2494f662aa218fb7e55bc37e7876449f788427e4d9565392bfe7d1c338cbc337',
        'shard-00005.tar': '2f39a62543dd6c170bfdb585b5d366ec5c5631666a2a9a1039cbe3317c4220ea',
        'shard-00006.json': '7f9182276b677345d3de8e4a3d4ae9ca78fd29a862a123e6890dff17521c7e1f',
        'shard-00006.tar': '7d43c17e39a8dd9ae9cfee993c973ad293384762203362dfdd2f80f69b19ec43',
        'shard-00007.json': 'a39f14044150aae2d851e4241efdde95c816de5b22d907f98543aa8b087dcc69',
        'shard-00007.tar': '6c90915f9976e5be642a039105c86eb138fc2127185f7ace568d47fccc0dd163',
        'shard-00008.json': '0ed6062932679141e3c4d39e765fa8bd6f59b5bd55269bff9582b29e80bef144',
        'shard-00008.tar': 'af4b8548eb2761c29f3c800b7d9063dc41a2a6cf4dccd636cbc4bce0b62457cf',
        'shard-00009.json': '746ad4c41571d2b12867a60d977e094697a506a2417aa822d8ee7bfeafc68da5',
        'shard-00009.tar': '7207af24c1d23d6b238498eb976cb6175b73ea0f311eb92022b5fa216857ac49',
        'shard-00010.json': 'aa06792b55db2006ec9a1f501e9ae5217b6cc56307f1a758e9a87e6de791cc15',
        'shard-00010.tar': '1a1d507c1182da80a254041d05e7b90a35e28cbdb6bcce61114d0dbae7bb60b7',
        'shard-00011.json': '21296d9f90745611582522e6f28c4ca41f828ce291fcc13bf743d5acedfcc2f2',
        'shard-00011.tar': '28f1d28761cc91342a49f04e9236df66fe3859c4bfeaae2720669c591b1c39e7',
        'shard-00012.json': '7aac82b3225ff4caef4e56beb9ef9fcaf2ddf452e1bd8bc7d8712584a5c78e47',
        'shard-00012.tar': 'e59d1291dc4a8a9b6a6fbb5fbaf6b9c0a4f5246a9199461e67ff009352af7ddb',
        'shard-00013.json': '4bc835f7b6b5c8d09cc19e79f33e8cf23a8f1859af1a75bbcf3fbc78a7c15fb5',
        'shard-00013.tar': 'fd9a057c4de5289afb60a3b32c1cabbb391a08734934d453b13978b110152522',
        'shard-00014.json': '3557707c2c334a2d39311283d017cc11b3edfc170477c7527c85e919a3be46e9',
        'shard-00014.tar': '9dc333c267dd8ce7cbc764beea6f5bc7222c6c25f1b217460909d216a9606e15',
        'shard-00015.json': '973e88645085aa35f5a67f464148a531df5741de567de29df62de9ebca84504c',
        'shard-00015.tar': '7630427054b0522393c19916c07d0e7a0ebf312960816ca385cc9e91f38aabef',
        'shard-00016.json': 'c1278e407ee2a0153e8c3ca6350ab8059aaf24b7abbad5f56f12c1b1c0702a1b',
        'shard-00016.tar': '4971fa621a03b02c5c217fa3714ad64484e77644a4ac245ebd1fa4d3a67ea730',
        'tokenizer.json': '81c122a4decbba9837c79b9395bbea32a68642f24871969bf3f7a66531256c2f',
    },
    'gpt2-pack': {
        'index.json': 'b1a2e7aba53f732348b98d1a2d86b0343c55092004e780eb2c90ab09881a2e05',
        'job.json': '1a820f6e575fa1a9cf563bb4b8b89a4d980a73e953cbde9d56cf84b8bc6041ff',
        'plan/tasks.idx': '5dc47f9870c55dfbab74247f1002b3d6ab248247fb6a1c4905da7490ce105f3b',
        'plan/tasks.jsonl': '8dc3c5a8ca651dbafa771bfcfebac1309f8df4147f65cbc49fb98a3c37bae754',
        'shard-00000.json': '7497956c22f9d3b27ab57f8711e890dd916455282544c1fe9a1d1e11de6bcf85',
        'shard-00000.tar': '0f2f418afdd2caf438070bce8bfe00f1babb6626a915e6e0414147d1adec775f',
        'shard-00001.json': 'ae705cf5275338c9a885bc90b9a08366450003bad327401c1adead3e881fa4cd',
        'shard-00001.tar': '4d7c4b7c5a8ef8a75ef14944176c4deb238daa78050422927640de11ef78a91f',
        'shard-00002.json': 'a4f0aba0ecc693a2e005c18e8290474e07b55e6b70541b26ec4aa1b3e525c1e2',
        'shard-00002.tar': 'eb6ee1b054ef9097646f37889a9bb0a2c126fc7045380db6654ca314725594fd',
        'shard-00003.json': '295b30b2326104f4053647e4fdced483b077abc1cbcb3c6c06a599e54d83d476',
        'shard-00003.tar': '28722f0f3a4e17d7cc6d2c57dde0d22ad17ca6a42177d22af39b3a11dc53aca3',
        'shard-00004.json': 'bd389ce24b6c6fbe78e216956d0147d87699537d35b7e03e088ab6252507ac36',
        'shard-00004.tar': '8ace4abc548856bb14bbda1d7c9ec3b2f68adc8d3c9cd74cf2776355255d155f',
        'shard-00005.json': 'feba57338fc0d12cbfda04711287342fed72c97cde68fa1fa0a6537445978899',
        'shard-00005.tar': '5572b4219abe07597c7ac0809967771e9d45cbba9092c226b003a68ab82f2dbb',
        'shard-00006.json': '4c8c5ff8f632fbcea94594b86ac2c6212aa5bc4502e5f14669c128c7e0a029e5',
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
