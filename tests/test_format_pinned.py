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
# Issue 12 deliberately re-pinned demo-pack's job.json: an ``auto`` plan records its plan-time hard-case
# check (``backend_check``, normalised above, not fingerprinted); nothing else changed.
PINS: dict[str, dict[str, str]] = {
    'cl100k-doc-u32': {
        'index.json': 'f2080dc6e7871b3818bd18f4e18e80dd951501f4a2f79db90058440e338a241e',
        'job.json': '207fd5c698fe8001df9fc6c56be625f99a3809ffc3c4630ae4d6fea54b7dc0b1',
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
        'job.json': 'b90955d3f4e64e7515d5e5ed38f59f172a794200467ddb32ad3ade18a82bebd4',
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
        'index.json': '5b8277fc70fa342f2d42a7cd1d9844441a840cb6af35a644c7940d2afe3d7349',
        'job.json': '001b4b1fc34bbf79544f7b9f512733ce55c5f04852f8d6e9695aa217326737fb',
        'plan/tasks.idx': 'ee5a0e9c4bff261053d125654c6133a1bc597d0222d97fc85a36ce2ffe1412ad',
        'plan/tasks.jsonl': 'ff86f83911182449d274f32523e4f5324a9822a05dd4df1dafa52695dcdb84aa',
        'shard-00000.json': '4cd972a4ea0ec93b7d8caa151ba47b33fe69377071d56279d59207d89911bb38',
        'shard-00000.tar': 'c01b7c82e892beb56a1e8442e2ad10e72da664c864dd6d9109e362520cff5745',
        'shard-00001.json': 'a873675f99486468b1683230d91488bd667f3bba6bb2e11135602ae8181b2258',
        'shard-00001.tar': 'db2cac3efad9f8c2d54392acc9082f586e7b5ad63c5b6333c528041f5854a192',
        'shard-00002.json': '15b535d76b781fb671669bf539b8531fd02b23ef76b2a6d84cdd9b303587b0fc',
        'shard-00002.tar': '0d21cf08f1ccdf0a5cd8e3a745880ae2019abfa2da0113952f7a596601e54793',
        'shard-00003.json': 'ee4e229bba557ab80b53effe0e348cccc83ea5d9c28fa1898d3c4301f17dffc5',
        'shard-00003.tar': '87b5e06c173b7abafc0c699dda594c8091a6615171e9508068f25e8b73a852a2',
        'shard-00004.json': '729a198d0bae80cc4c3cd0736be704fab24e02ed974c94caa1911577ece163a9',
        'shard-00004.tar': '192d059d9d58884e91f3997f98ccb99e9ee5037f1942f8e29e0cd31012a06533',
        'shard-00005.json': '699dff71a903da074c96c4ca749e6be3f2248016253040a8658a1cf703a16b32',
        'shard-00005.tar': 'b63d84b9eb3ff5a1abec0bb0c90dfbfc7586ab3a318ac20ec9bc3e73389a136f',
        'shard-00006.json': '71b93b05f644ad238290362bac569841384085153ec164eff979b5998ca0bd69',
        'shard-00006.tar': '4bf5aa3dbf4454555b5e6e980c0d82be498422ed41e3683c35dccad27ec6dab7',
        'shard-00007.json': '444fbc311420c20b1887b469e807e7d380f6ed0efc031949be9413ca83e4ad69',
        'shard-00007.tar': '18d450d55ad567bbb2de04fb3b869c21a7c4392c8f7d91cc7a30ab6ebcfd633f',
        'shard-00008.json': 'a9078ed5a4c942b9caf679c34044ba9d64d34cf2ac184b08dc02cb3b23e4113f',
        'shard-00008.tar': '57ba21ee354c52a33f171d33e0ac498d611fc8760a5a2137bc7a9d8dc22ab5c0',
        'shard-00009.json': '0665dfe9220b26898677192345fb8a8e9a1438ee714861cfa0efe116b830d76f',
        'shard-00009.tar': '64a52299639fbfb3fbd582eeb3a139756ded915ea7e45b85887ef40d6c428856',
        'shard-00010.json': '10f9e3e9ba4830ce74a9f9c6ee50ee8a8bd384be025d35de9ab350f3c278c487',
        'shard-00010.tar': '776d49accdf4390f419617467003b47cca756309a665a3553373db3ffdff2724',
        'shard-00011.json': '4141b860cf0dee8805e53da82e77174b70a47ca1a1349371e401e47dfb7d9bcb',
        'shard-00011.tar': '7b4ac8dc079ec4a065b00b5d6b794a2c79d235f9e3e292b64039277a2e1d66b0',
        'shard-00012.json': 'c52ce53dbb151bfba901636897cde1b907e6d1e03f7594b897bd6840fc84aa91',
        'shard-00012.tar': '9c71ab467b56f6a2043a357a39df1b7699360a83132a5a04ab9777c82f8a1946',
        'shard-00013.json': '59ae953616756359b2e8060aa3589e8a2cfc36a11544e84a596b51eed4e5d87f',
        'shard-00013.tar': 'acda63613638547159f3f223699f61f4b419e13bc02eda8ff699a10f6d460589',
        'shard-00014.json': 'e297195f494880854ee7bccaff09b001695cd4c7d38999674908e068c3faaf15',
        'shard-00014.tar': 'efeabcfd6157be269a8e0e2199e3d1fd5cc891126243c5c8706b60bace2c22e2',
        'shard-00015.json': 'd95c1cf255b3b26a4465e25c2f6af95a69e8b2a5ba9d2b6bb2f6928fd518da1c',
        'shard-00015.tar': '6dc37b8b6aa8931795af5d2568bde35926509c1e7ff5e474d9aa2668c4a93351',
        'shard-00016.json': '2fd47c1565f8563013bb48347f3a78981a4422f6a65f15873f3625229983e938',
        'shard-00016.tar': 'c8ffafcde6c4a12e168ad74b893bb4de8030b80bb982c76faf53eb0c40bfd3a3',
        'shard-00017.json': 'd13ac14d81773d4463dbe7c53eda764c41b2b408ebcbdd56a32abf97a409a960',
        'shard-00017.tar': '7567897fe00e7f91d5e3a9f5cfd4be6d567ec467cce792556d76e712169e21b7',
        'tokenizer.json': '81c122a4decbba9837c79b9395bbea32a68642f24871969bf3f7a66531256c2f',
    },
    'gpt2-pack': {
        'index.json': '258c5603c8d4279e369999848d2a8b76127bbeddf98b25bee7642c80696b437b',
        'job.json': 'e6c426b89faed28e80103d1013c5f172a14e8fd73f8fdfd57a3bef2b33fe0d29',
        'plan/tasks.idx': 'e5fda91d897d76c51e0c0aab39d62d8840c170225666d60cebc0b61fed1b06ea',
        'plan/tasks.jsonl': '687ed870733729a407259988cd5e96ac3d53dd43f846d057038d58aaa392100a',
        'shard-00000.json': 'b95b0ab8522e3524c77c0768f7987bcd26b12609b405da10428b12537670f690',
        'shard-00000.tar': 'bc3ae816dcf1752a7ec17e609e12b9aecedea43aa5be5007a6d15d615beb2617',
        'shard-00001.json': 'c08b94708203e6a6626442d02fa1605b134df8163c9e36920bc47c48dc5db5f0',
        'shard-00001.tar': 'cbf5cf83a7014d1f3728c88ee9de48ff872a7d451aa10940771e9f130b65c16c',
        'shard-00002.json': '2fb6e54066c283209a58e0cb2be669bdec442a9b0fea6943a7607ff488fde3e0',
        'shard-00002.tar': '4473c98901c882800d078cbf4a9c0dfa853a0567fef8a56ac038f3e717b3fdaf',
        'shard-00003.json': '4da6c0d7dbb8c0c24b320f7c5de402cb1986382ceeaf00624215e6977648b036',
        'shard-00003.tar': 'ed72ea91e14e5fe5e23543bdb898271b3229707d1c3994330dd81da64d7341a9',
        'shard-00004.json': 'ec7e40ffc801c3401462f777b1e0f1db05fc39cdee10adc0c5662d73b2e61e7c',
        'shard-00004.tar': '99de8edf65c038bd326a738c74f12d148c35daa9eeb64ae2fb4281fd005c675e',
        'shard-00005.json': '1786adeb6a8ddb669d091848f605c6e1623eeee4d7f7a8559f1f78a233c27fec',
        'shard-00005.tar': 'd4891410262ad389b43f4ff4a10dacee208ffc3eaffce0da876b89b9ef59a5dd',
        'shard-00006.json': 'a2c95f678b91e0444eeaf017dce34db59ce43dc686135e8d507d80803fff9311',
        'shard-00006.tar': '4f79c7ec6e656220d7dcdaa06e50ca316c6c63fee9ace5c67cb4dbaeb47602ad',
        'shard-00007.json': '322c561ff6c0b149da8aa6cdffb83e2b5c8b2da899df1fdb79accdfceb915db3',
        'shard-00007.tar': 'cc897bcc02e7442f2c0c1d401f2a84b6876f58f2b54696db8056f68b47b765e6',
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
    plan_job([corpus], out, tokenizer, TokenizeOptions(**options), PlanOptions(target))
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
