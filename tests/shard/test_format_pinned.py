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
from conftest import SHARED, sample_tokenizer_at

from shardprep.api import plan_job
from shardprep.demo_data import write_sample_corpus
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
# Issue 29 deliberately re-pinned every sidecar and index.json, and only those: format 3 (``"format_version": 3``,
# each document's origin in the sidecar's ``origins``, each ``inputs`` entry's plan input number); the shards'
# tar bytes, job.json and plan/ are unchanged.
PINS: dict[str, dict[str, str]] = {
    'cl100k-doc-u32': {
        'index.json': '1574c231836cc80febf9ce27d3616aa9b2f66c445a5925003fea7d38a047b594',
        'job.json': '2d9c5a5eb61b1d7a6345f724ab4b17d0cad6499b877120a515efa89bf47a4d70',
        'plan/tasks.idx': 'cbc58fdc6b8764604ef8386bef81b9a9b1aef04492f756974e74e4f05ab8741f',
        'plan/tasks.jsonl': '52d7e7da22206f83ae904b109471d401b601688e8b14262af4bbd253703872e3',
        'shard-00000.json': 'cb3bc21d3006cc5940111635a7ffba81278569a91c197fd6dde9ad2f3aa71d45',
        'shard-00000.tar': 'd8160690107b71f63be5f9387815a8fc57a8a89e2d9b942094dee2abc0f34815',
        'shard-00001.json': 'a20726a440713c04b42ac77e11a016034b27705ad070255b2b2148e4a5ebb7cd',
        'shard-00001.tar': 'd7334d4d7d5b1ecc3c4e0a950a4db3b3e0fd92277a6860ba07231df049dfc965',
        'shard-00002.json': '886b73797ccd2be538a4389a7d3552f0fd068c5a8bbbb5e8898346523b0688b0',
        'shard-00002.tar': 'c664b5812c6531afe595a51c5e2eb1188cbc82b11f851464a9d11ffdd92df45e',
        'shard-00003.json': '108b015c70c230973e9a899522dc19e9f1516575d120a922c0dabdf7c4ede77d',
        'shard-00003.tar': 'ab229ec4368a446d1198405caf2c865b12bafcac811be7c794adf475a9401fdb',
        'shard-00004.json': '618ee4076240f6753e8dde94b696c3d123636a6f0fa8bdb2237a3e0addf6d104',
        'shard-00004.tar': '0526e7be914b9c73291ac589ec351b86e7c3206df50302d157a0012609fd19e5',
        'shard-00005.json': '04546af3dc633f92d1fa8767f546dd32be50f89c6bc2e22e77c602695ab0187d',
        'shard-00005.tar': 'fbad176b65bd424be785843834bb6cad53e1d426d1709965bdf879a894e2aae2',
        'shard-00006.json': '33a5070e3c381d1ea33464184b6f57e783f3fe4fe0e4272a74c18f9ceb738b23',
        'shard-00006.tar': '0ed5394cda6a7b5755989359c7bfefc8783a8b86bb9b7551028ae5d67688f0f1',
        'shard-00007.json': 'c65e7a7b5c05c5df1455e8c18366db9e22d7cde8cab0dfcb07e11a482d9e33ba',
        'shard-00007.tar': 'c9d80adf8b4b6aa5e2bd5689b43b0e6876868d66366c3b729ac90aac6e0a870e',
        'tokenizer.json': 'bd584f75d898c25b0e6dbbe89271851afd87a7c1de7f4ca4ec9f74d7e1187d00',
    },
    'demo-doc-bos': {
        'index.json': '8cb77e9263914a0f2ed20622362c0593ae9b824224d5fccbcdb2295d88b3cf6a',
        'job.json': '283e7645491235cd2c378a9f44e7fb933444459b3d7bb61ba8cee2082bfbf148',
        'plan/tasks.idx': 'cbc58fdc6b8764604ef8386bef81b9a9b1aef04492f756974e74e4f05ab8741f',
        'plan/tasks.jsonl': '52d7e7da22206f83ae904b109471d401b601688e8b14262af4bbd253703872e3',
        'shard-00000.json': '132056134825f849642a5c74027ebfab9d2a69221ce0d8706326595d5519dbc8',
        'shard-00000.tar': '271e04f8fcc4390f47ae84310c67719b8d005bfb51825274416d2e6d261ff91a',
        'shard-00001.json': 'f0266c17c73359255effd701145b18c69291645b66c9fc2287016ba7ba85b02b',
        'shard-00001.tar': 'e8330527c7493dba373ac54f16b0edd796448633aa62f5abc65863e9cb410cab',
        'shard-00002.json': '6da60b28e8f00ea9ad29907b2fd9f47353251e86864518fd2fb0e95ef072a66d',
        'shard-00002.tar': '635edbd745ccc56ba4570c9c14a9c2c8b2fb5f90b05e6cbc3dc131f45511018b',
        'shard-00003.json': '7c30da8cbd481b0d7fdd07ee72496b5d51b48b4d6b3bee27ee4605eb84462525',
        'shard-00003.tar': 'a2c0aed6235904c80032ae3820b2b53f94072e1b45486ce1043a6edaf91de72e',
        'shard-00004.json': 'c6f59ac52e8fff4b1525954c3ac5556d34fc899ac1c88e801a6bc2b137fc08b7',
        'shard-00004.tar': 'e53ce3a7f2d53dd6d0c4cbe3fd46a105b8854f0aea55455aaed5ef652d0d7987',
        'shard-00005.json': '01f455ea995102a4430f2bc3df88e72ad26ee7d43feb71656dfbadc8e30577c2',
        'shard-00005.tar': '5e8fa5a911ad0fa719221a700d0c79b3fa1a71185f9a92effde0e0f0bf8f861a',
        'shard-00006.json': '612b2f2ba00c9ae035a71c7e131d40700de6a8f1aa9d389a81824c3b36e23b8a',
        'shard-00006.tar': 'f766fc2a9863d79277b164f90f2e1d38934ad6b39cab5aff6eecf638e1589925',
        'shard-00007.json': 'b8388d1bd31e06eff5aa88c2c71f855204ad66a7a7aa89cfd266f2eed15f475f',
        'shard-00007.tar': '52922265766c73507922dc6dcbbbd8de3de433c63ccdc3da815bfb7fb1240275',
        'tokenizer.json': '81c122a4decbba9837c79b9395bbea32a68642f24871969bf3f7a66531256c2f',
    },
    'demo-pack': {
        'index.json': 'f070e32258170e6d95f12700ccd1750c65d4cdc86ae0b0d340ea9fd6fb47f6dd',
        'job.json': '65240adc22ff7d4504ce17b55087f7712cb9f716e61e1cb7d3c7a6a63b7697d3',
        'plan/tasks.idx': '674598082f7ae0afa0c2c37bc4b0fc46a0e98a3fbbfcd0e217b38bb2d06b5f1f',
        'plan/tasks.jsonl': 'b3053c70a3ad731dc0be176fd0f151e25e7384721b894d0b738fa15c5a79512f',
        'shard-00000.json': 'ac7801023c1ae1b3e934a8ca2d17950a610207bb05c38bd2586b761a3d65fe3a',
        'shard-00000.tar': 'b9c84489a5a12f2adb62488cbb01d1f0562625e93c8bbc022ced845ccabdd9c5',
        'shard-00001.json': '621bbe5819ec8aa02c4abf6caba956599e0f4a35d0fc26594df6f8cc2633fc7c',
        'shard-00001.tar': '1cf7310da05b925057e2ec42958b46308bf44227daacee9f01b850760e062249',
        'shard-00002.json': 'efc14863beb35d4a4be5b3ea62fa388d3adb3e2679fcafaf7ccd06a9079f2988',
        'shard-00002.tar': 'de32594544d4f6fc3bbf3681886188f376eb833ad2bc8c6b8beae03cb4d64c56',
        'shard-00003.json': '678927022f9014b93641e1617b21f96a586c806748e614c2f635b323da181df1',
        'shard-00003.tar': 'bb4e9f1f53b4f708712c4c92ee468f5ed34e82ff7f06129bd8325e9b3913914f',
        'shard-00004.json': '61eddfcf1de83d5ffbab2fc1bcfc7961c112c3b275965d614f1fa3a8fa5a65e6',
        'shard-00004.tar': '82a1f4fa3e8976ed28383cc56da587024f164ae955aeb76cbd565afdf1fe14c0',
        'shard-00005.json': '0dcd607f97cba5b09b3c9a363e190b8bf8bd06207e97ebea631aef4636d6dfe6',
        'shard-00005.tar': '2f39a62543dd6c170bfdb585b5d366ec5c5631666a2a9a1039cbe3317c4220ea',
        'shard-00006.json': 'd7502d8d0ec4d3f174279a87a29f20c85f62f50eb959e131b0a65d893f723b10',
        'shard-00006.tar': '7d43c17e39a8dd9ae9cfee993c973ad293384762203362dfdd2f80f69b19ec43',
        'shard-00007.json': '1943d8226524d45870a7e313a78d5274b4615c9fd789cf533fa3d4911454a8b2',
        'shard-00007.tar': '6c90915f9976e5be642a039105c86eb138fc2127185f7ace568d47fccc0dd163',
        'shard-00008.json': '480b798e418125df138debffc2f3d05f9428fd286c2ae854c9c2f4d076d07780',
        'shard-00008.tar': 'af4b8548eb2761c29f3c800b7d9063dc41a2a6cf4dccd636cbc4bce0b62457cf',
        'shard-00009.json': 'e604243ab6201881ac694b4d1f84f81c88af31e990d28325f5e4b15b2067810d',
        'shard-00009.tar': '7207af24c1d23d6b238498eb976cb6175b73ea0f311eb92022b5fa216857ac49',
        'shard-00010.json': '68b0a1a73e6ea5d9a7df38ce13cf3d7e636eb1c75394bc7fc61bed99b60c6a2e',
        'shard-00010.tar': '1a1d507c1182da80a254041d05e7b90a35e28cbdb6bcce61114d0dbae7bb60b7',
        'shard-00011.json': '4142d6e29d55ec81f71f313a7faf16ad02c213b15c0d46c3c4f68e858208094b',
        'shard-00011.tar': '28f1d28761cc91342a49f04e9236df66fe3859c4bfeaae2720669c591b1c39e7',
        'shard-00012.json': '8842d4fd124060fbf03bc21a20cdfa9329e1b42e79294e8f322adbc1bd916a5e',
        'shard-00012.tar': 'e59d1291dc4a8a9b6a6fbb5fbaf6b9c0a4f5246a9199461e67ff009352af7ddb',
        'shard-00013.json': '18fcc47affa57a473125000be52532db302124728e03ce01685a9b55fa7dd3be',
        'shard-00013.tar': 'fd9a057c4de5289afb60a3b32c1cabbb391a08734934d453b13978b110152522',
        'shard-00014.json': 'b626b6d2cfc2e6245197adefdf3534ccc655a777182c9a6b8b206b1305ec6f7e',
        'shard-00014.tar': '9dc333c267dd8ce7cbc764beea6f5bc7222c6c25f1b217460909d216a9606e15',
        'shard-00015.json': '786090b92d9d8a083caac3337e87a1323e267e6c75dcaed03dd5a0711e5004ab',
        'shard-00015.tar': '7630427054b0522393c19916c07d0e7a0ebf312960816ca385cc9e91f38aabef',
        'shard-00016.json': '716497ba634fa6227689d8ac896d436e36e081602be3d2d2ac6bb6a7b11115c3',
        'shard-00016.tar': '4971fa621a03b02c5c217fa3714ad64484e77644a4ac245ebd1fa4d3a67ea730',
        'tokenizer.json': '81c122a4decbba9837c79b9395bbea32a68642f24871969bf3f7a66531256c2f',
    },
    'gpt2-pack': {
        'index.json': '950d4c81fe88b12b6b12ddd41d42faffe26ed157cc0426b43d14db8550ff857b',
        'job.json': '1a820f6e575fa1a9cf563bb4b8b89a4d980a73e953cbde9d56cf84b8bc6041ff',
        'plan/tasks.idx': '5dc47f9870c55dfbab74247f1002b3d6ab248247fb6a1c4905da7490ce105f3b',
        'plan/tasks.jsonl': '8dc3c5a8ca651dbafa771bfcfebac1309f8df4147f65cbc49fb98a3c37bae754',
        'shard-00000.json': '0f66381f1e1568a0365c30c5e29881fcc4b4058656f0a2a00bca3e58dfbacc01',
        'shard-00000.tar': '0f2f418afdd2caf438070bce8bfe00f1babb6626a915e6e0414147d1adec775f',
        'shard-00001.json': '3ce5187f81cb6bc4cd5d10cb1ff19cb1e92429ef3e1e13bf76c2e2287d780b98',
        'shard-00001.tar': '4d7c4b7c5a8ef8a75ef14944176c4deb238daa78050422927640de11ef78a91f',
        'shard-00002.json': '44d14a156f489c3ffcb9475d5c75966a3c57532832ff9335a3fdba64546a142a',
        'shard-00002.tar': 'eb6ee1b054ef9097646f37889a9bb0a2c126fc7045380db6654ca314725594fd',
        'shard-00003.json': '6d0084142419a534122088ee98c1e29e88b786d8c249b83ace977d5c07cb6b44',
        'shard-00003.tar': '28722f0f3a4e17d7cc6d2c57dde0d22ad17ca6a42177d22af39b3a11dc53aca3',
        'shard-00004.json': 'bf207da64e0286b5e862f062bad4d59a6f941591928b87cb9e52e78183286cd8',
        'shard-00004.tar': '8ace4abc548856bb14bbda1d7c9ec3b2f68adc8d3c9cd74cf2776355255d155f',
        'shard-00005.json': '9e04f525966ed7f02adc0af3b5c717ba847d6dcc2bf20fbb7c6a554653cc2aba',
        'shard-00005.tar': '5572b4219abe07597c7ac0809967771e9d45cbba9092c226b003a68ab82f2dbb',
        'shard-00006.json': 'db7607753cde59a1389f5df3b1783986beca83e092e569fdedd0cdf48554994e',
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
        return sample_tokenizer_at(dest)
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
