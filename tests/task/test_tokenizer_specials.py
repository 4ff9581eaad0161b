"""EOS/BOS detection (shardprep.tokenizer.specials): the documented precedence option > tokenizer_config >
post-processor > added-token names, on small tokenizers built here, and on the twelve shared real ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SHARED_TOKENIZERS
from helpers import reference_tokenizer

from shardprep.errors import TokenizerError
from shardprep.tokenizer.load import resolve_tokenizer
from shardprep.tokenizer.specials import normalized_name


def _tokenizer(path: Path, specials: list[str], *, plain: tuple[str, ...] = (), processor=None) -> Path:
    """A word-level tokenizer with ``specials`` as special added tokens and ``plain`` as ordinary ones."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate(["<unk>", "a", "b", *specials, *plain])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(specials)
    tok.add_tokens(list(plain))
    if processor is not None:
        tok.post_processor = processor
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path


def _template(single: str, pair: str, specials: list[str]):
    from tokenizers.processors import TemplateProcessing

    return TemplateProcessing(single=single, pair=pair, special_tokens=[(s, 3 + i) for i, s in enumerate(specials)])


def _choice(info, kind: str) -> tuple[str | None, str | None]:
    return getattr(info.info, f"{kind}_token"), info.choices[kind].source


def test_template_end_token_is_the_eos_only_when_the_pair_template_ends_with_it(tmp_path):
    specials = ["<BOS_TOKEN>", "<EOS_TOKEN>", "<EOP_TOKEN>"]
    # Cohere's shape: EOP separates A from B, so it is not an end of document; the EOS comes by name
    sep = _template("<BOS_TOKEN> $A <EOP_TOKEN>", "<BOS_TOKEN> $A <EOP_TOKEN> $B:1", specials)
    r = resolve_tokenizer(str(_tokenizer(tmp_path / "a.json", specials, processor=sep)))
    assert _choice(r, "eos") == ("<EOS_TOKEN>", "added_tokens")
    assert _choice(r, "bos") == ("<BOS_TOKEN>", "post_processor")
    # T5's shape: the token ends single and pair sequences, so it is the EOS even with an unusual name
    end = _template("$A <EOP_TOKEN>", "$A <EOP_TOKEN> $B:1 <EOP_TOKEN>", specials)
    r = resolve_tokenizer(str(_tokenizer(tmp_path / "b.json", specials, processor=end)))
    assert _choice(r, "eos") == ("<EOP_TOKEN>", "post_processor")
    assert r.info.eos_id == 5 and "$A <EOP_TOKEN>" in r.choices["eos"].why


def test_sequence_and_roberta_processors(tmp_path):
    from tokenizers.processors import ByteLevel, RobertaProcessing, Sequence

    specials = ["<start>", "<stop>"]
    seq = Sequence([ByteLevel(trim_offsets=False), _template("<start> $A", "<start> $A $B:1", specials)])
    r = resolve_tokenizer(str(_tokenizer(tmp_path / "s.json", specials, processor=seq)))
    assert _choice(r, "bos") == ("<start>", "post_processor") and r.info.eos_token is None
    rob = RobertaProcessing(("<stop>", 4), ("<start>", 3))
    r = resolve_tokenizer(str(_tokenizer(tmp_path / "r.json", specials, processor=rob)))
    assert _choice(r, "eos") == ("<stop>", "post_processor")
    assert r.info.bos_token is None          # cls is a classification slot, not taken as a BOS


def test_names_legacy_order_first_then_special_tokens_by_normalised_name(tmp_path):
    r = resolve_tokenizer(str(_tokenizer(tmp_path / "l.json", ["</s>", "<|endoftext|>", "<s>"])))
    assert _choice(r, "eos") == ("<|endoftext|>", "added_tokens") and r.info.bos_token == "<s>"
    r = resolve_tokenizer(str(_tokenizer(tmp_path / "d.json", ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"])))
    assert (r.info.eos_token, r.info.eos_id) == ("<｜end▁of▁sentence｜>", 4)
    assert (r.info.bos_token, r.info.bos_id) == ("<｜begin▁of▁sentence｜>", 3)
    # a non-special added token is text, not a control token: its name alone does not make it the EOS
    r = resolve_tokenizer(str(_tokenizer(tmp_path / "p.json", [], plain=("<EOS_TOKEN>",))))
    assert r.info.eos_token is None and "--eos-token" in r.choices["eos"].why
    assert [normalized_name(s) for s in ("<|end_of_text|>", "[EOS]", "<end-of-sentence>", "<|endoftext|>")] == \
        ["end_of_text", "eos", "end_of_sentence", "endoftext"]


def test_config_beats_post_processor_and_option_beats_config(tmp_path):
    specials = ["<x>", "<y>", "<z>"]
    proc = _template("$A <x>", "$A <x> $B:1 <x>", specials)
    d = tmp_path / "tok"
    _tokenizer(d / "tokenizer.json", specials, processor=proc)
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "<y>", "special": True}}))
    r = resolve_tokenizer(str(d / "tokenizer.json"))
    assert _choice(r, "eos") == ("<y>", "tokenizer_config")
    r = resolve_tokenizer(str(d), eos_token="<z>", bos_token="<x>")
    assert _choice(r, "eos") == ("<z>", "option") and _choice(r, "bos") == ("<x>", "option")
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<nope>"}))
    with pytest.raises(TokenizerError, match=r"EOS token '<nope>' is not in the vocabulary of .* \(named by "
                                             r"tokenizer_config: eos_token in the tokenizer's config\)"):
        resolve_tokenizer(str(d))
    (d / "tokenizer_config.json").write_text("[1]")
    with pytest.raises(TokenizerError, match="tokenizer_config.json: expected a JSON object"):
        resolve_tokenizer(str(d))


def test_plan_prints_the_choice_and_why(tmp_path):
    from helpers import run_cli

    specials = ["<BOS_TOKEN>", "<EOS_TOKEN>", "<EOP_TOKEN>"]
    proc = _template("<BOS_TOKEN> $A <EOP_TOKEN>", "<BOS_TOKEN> $A <EOP_TOKEN> $B:1", specials)
    tok = _tokenizer(tmp_path / "c.json", specials, processor=proc)
    (tmp_path / "in.txt").write_text("a b\n")
    out = run_cli("plan", "-i", tmp_path / "in.txt", "-o", tmp_path / "o", "-t", tok).stdout
    assert "EOS '<EOS_TOKEN>' = 4 (added_tokens: a special added token named as an end of text/sentence) " \
           "[added to every document]" in out
    assert "BOS '<BOS_TOKEN>' = 3 (post_processor: the template prepends it to every sequence: <BOS_TOKEN> $A) " \
           "[not added]" in out


# What each shared tokenizer's own model card / tokenizer_config.json says (tokenizers/README.md), written
# out here rather than derived, so this checks the detection.  Columns: EOS, BOS, pad.  The ten that
# resolved before issue 14 keep exactly their earlier choice (and so the bytes of job/sidecars/index):
# CLIP's BOS stays None (its cls is not guessed) and GPT-NeoX's <|padding|> is not guessed as pad.
EXPECTED = {
    "bpe-bytelevel-128k-deepseek-r1": ("<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence｜>", None),
    "bpe-bytelevel-100k-cl100k-dolma2": ("<|endoftext|>", None, "<|pad|>"),
    "bpe-bytelevel-75k-cohere": ("<EOS_TOKEN>", "<BOS_TOKEN>", None),
    "bpe-spm-bytefallback-phi3-mini": ("<|endoftext|>", "<s>", None),
    "wordpiece-bert-base-uncased": ("[SEP]", "[CLS]", "[PAD]"),
    "wordpiece-all-minilm-l6-v2": ("[SEP]", "[CLS]", "[PAD]"),
    "unigram-t5-small": ("</s>", None, "<pad>"),
    "bpe-bytelevel-roberta-base": ("</s>", "<s>", "<pad>"),
    "bpe-bytelevel-falcon-7b": ("<|endoftext|>", None, None),
    "bpe-bytelevel-gpt-neox-20b-olmo": ("<|endoftext|>", None, None),
    "bpe-clip-vit-base-patch32": ("<|endoftext|>", None, None),
    "gpt2": ("<|endoftext|>", None, None),
}


def shared_tokenizer(name: str) -> Path:
    path = SHARED_TOKENIZERS / name / "tokenizer.json"
    if not path.is_file():
        pytest.skip(f"shared tokenizer not present at {path}")
    return path


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_shared_tokenizer_resolves_its_own_specials(name):
    path = shared_tokenizer(name)
    r = resolve_tokenizer(str(path))
    assert (r.info.eos_token, r.info.bos_token, r.info.pad_token) == EXPECTED[name]
    ref = reference_tokenizer(path)
    for kind, token in zip(("eos", "bos", "pad"), EXPECTED[name]):
        assert getattr(r.info, f"{kind}_id") == (None if token is None else ref.token_to_id(token))
