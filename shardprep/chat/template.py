"""Which chat template a job renders with, and the special-token strings the template sees.

transformers chooses the template in this order, and so does :func:`load_chat_template`: an explicit file
(``--chat-template FILE``); ``chat_template.jinja`` beside the tokenizer (transformers lets that file win
over the config; a named template also from ``additional_chat_templates/NAME.jinja``); then
``tokenizer_config.json``'s ``chat_template``, a string or a list of ``{name, template}`` (``default``
unless a name is asked for).  The template is frozen into the plan by its text and sha256.

The template sees the special tokens as transformers' ``special_tokens_map`` holds them: the named ones
(``bos_token``, ``eos_token``, ``unk_token``, ``sep_token``, ``pad_token``, ``cls_token``, ``mask_token``)
that ``tokenizer_config.json`` sets (a string, or an AddedToken dict's ``content``), then
``special_tokens_map.json`` for the ones it leaves unset.  Nothing else: a token the config does not name
is not defined for the template (DeepSeek's template writes ``bos_token``, so its config must name it).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardprep.errors import ConfigError

SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
CONFIG = "tokenizer_config.json"
SPECIAL_MAP = "special_tokens_map.json"
TEMPLATE_FILE = "chat_template.jinja"
TEMPLATE_DIR = "additional_chat_templates"
DEFAULT_NAME = "default"
# transformers' own test for a template that marks what the assistant generates
_GENERATION = re.compile(r"\{\%-?\s*generation\s*-?\%\}")


@dataclass(frozen=True)
class ChatTemplate:
    """A chat template as frozen into a plan: its text, where it came from, its digest and the special
    tokens it is rendered with."""

    text: str
    origin: str
    special_tokens: dict[str, str] = field(default_factory=dict)
    sha256: str = ""

    def __post_init__(self) -> None:
        digest = hashlib.sha256(self.text.encode("utf-8")).hexdigest()
        if self.sha256 and self.sha256 != digest:
            raise ConfigError(f"{self.origin}: the chat template's sha256 is {digest}, not the recorded {self.sha256}")
        object.__setattr__(self, "sha256", digest)

    @property
    def has_generation_markers(self) -> bool:
        """Whether the template marks assistant output with ``{% generation %}`` (transformers' test)."""
        return bool(_GENERATION.search(self.text))

    @property
    def bos_token(self) -> str | None:
        return self.special_tokens.get("bos_token")

    @property
    def eos_token(self) -> str | None:
        return self.special_tokens.get("eos_token")


def load_chat_template(tokenizer_path: str | Path, explicit_file: str | Path | None = None,
                       name: str | None = None) -> ChatTemplate:
    """The chat template for the tokenizer at ``tokenizer_path`` (a ``tokenizer.json`` or its directory).
    Raises ConfigError naming the file when a file is unreadable or no template is found."""
    path = Path(tokenizer_path)
    directory = path if path.is_dir() else path.parent
    config = _read_json(directory / CONFIG)
    specials = special_tokens_of(config, _read_json(directory / SPECIAL_MAP))
    if explicit_file is not None:
        file = Path(explicit_file)
        return ChatTemplate(_read_text(file), str(file), specials)
    text, origin = _from_files(directory, name) or _from_config(config, directory / CONFIG, name)
    return ChatTemplate(text, origin, specials)


def special_tokens_of(config: dict[str, Any], special_map: dict[str, Any]) -> dict[str, str]:
    """The named special tokens as strings, the config first (see the module docstring)."""
    tokens: dict[str, str] = {}
    for source in (config, special_map):
        for key in SPECIAL_TOKEN_NAMES:
            value = source.get(key)
            if isinstance(value, dict):
                value = value.get("content")
            if isinstance(value, str) and key not in tokens:
                tokens[key] = value
    return {key: tokens[key] for key in SPECIAL_TOKEN_NAMES if key in tokens}


def _from_files(directory: Path, name: str | None) -> tuple[str, str] | None:
    if name not in (None, DEFAULT_NAME):
        named = directory / TEMPLATE_DIR / f"{name}.jinja"
        return (_read_text(named), str(named)) if named.is_file() else None
    file = directory / TEMPLATE_FILE
    return (_read_text(file), str(file)) if file.is_file() else None


def _from_config(config: dict[str, Any], path: Path, name: str | None) -> tuple[str, str]:
    value = config.get("chat_template")
    if value is None:
        raise ConfigError(f"{path}: no chat template (no 'chat_template' there and no {TEMPLATE_FILE} beside it)",
                          hint="give one with --chat-template FILE")
    if isinstance(value, str):
        if name not in (None, DEFAULT_NAME):
            raise ConfigError(f"{path}: 'chat_template' is a single template, there is no template named {name!r}")
        return value, f"{path}#chat_template"
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        wanted = name or DEFAULT_NAME
        text = named.get(wanted)
        if isinstance(text, str):
            return text, f"{path}#chat_template[{wanted}]"
        names = ", ".join(sorted(str(n) for n in named))
        raise ConfigError(f"{path}: no chat template named {wanted!r} (names: {names})",
                          hint="choose one by name, or give --chat-template FILE")
    raise ConfigError(f"{path}: 'chat_template' must be a string or a list of {{name, template}}")


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ConfigError(f"{path}: cannot read it as JSON ({e})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return value


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read the chat template ({e})") from None
