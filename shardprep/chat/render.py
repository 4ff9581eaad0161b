"""Render a conversation with a chat template exactly as transformers' ``apply_chat_template`` does.

The same environment as transformers 5 (``utils/chat_template_utils.py``): a jinja2
``ImmutableSandboxedEnvironment`` with ``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols``
extension and a ``{% generation %}`` extension, a ``tojson`` filter that does not escape HTML (json.dumps,
``ensure_ascii=False``), the globals ``raise_exception``, ``strftime_now`` (the local clock, as
transformers: a template that prints the date renders differently on another day), ``dict`` and a
``namespace`` that refuses underscore names.  The same variables: ``messages``, ``tools``, ``documents``,
``add_generation_prompt=False``, the special tokens (:mod:`shardprep.chat.template`), then the template
keyword arguments (which win over a special token of the same name).  The same message preparation:
keys whose value is null are dropped (transformers does this before rendering; a template that tests
``content is none`` sees an undefined ``content`` instead), and a message with reasoning under
``reasoning_content``, ``thinking`` or ``reasoning`` gets it under ``thinking`` and ``reasoning_content``.
Written for shardprep with jinja2 only: transformers is not imported.

A render with generation markers also returns the character spans each ``{% generation %}`` block wrote,
measured as transformers measures them (the length of the output yielded before the block).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment

from shardprep.chat.template import ChatTemplate
from shardprep.errors import ConfigError, EnvironmentProblem, InputDataError

REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
MIN_JINJA2 = (3, 1, 6)
Span = tuple[int, int]
Tools = Sequence[Mapping[str, Any]] | None


class ChatTemplateError(InputDataError):
    """The template refused a conversation (``raise_exception`` or any error while rendering); carries the
    template's own message.  A task counts the record as skipped, naming its file and line."""

    def __init__(self, template_message: str):
        super().__init__(f"the chat template refused the conversation: {template_message}")
        self.template_message = template_message


@dataclass(frozen=True)
class Rendered:
    """A rendered conversation; ``generation`` holds the ``{% generation %}`` spans (None without markers)."""

    text: str
    generation: list[Span] | None = None


class _Tracker:
    """Where the output stands while a render is being generated (the text yielded so far)."""

    def __init__(self) -> None:
        self.length = 0
        self.spans: list[Span] = []


_TRACKING: ContextVar[_Tracker | None] = ContextVar("shardprep_generation_tracker", default=None)


class GenerationExtension(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}``: renders its body and, while a tracked render runs,
    records the span it wrote (starting at the output yielded before it, as transformers counts)."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation"), [], [], body).set_lineno(lineno)

    def _generation(self, caller: Any) -> str:
        text: str = caller()
        tracker = _TRACKING.get()
        if tracker is not None:
            tracker.spans.append((tracker.length, tracker.length + len(text)))
        return text


class _TemplateDict:
    """``dict`` for templates: building dictionaries only, nothing reachable through attributes."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class _Namespace(jinja2.utils.Namespace):
    """jinja's namespace, refusing underscore-prefixed attribute names (no way into CPython internals)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 -- jinja's own signature trick
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: object) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}. "
                "Please rename the attribute.")


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


def make_environment() -> ImmutableSandboxedEnvironment:
    """The environment transformers renders chat templates in (see the module docstring).  Like
    transformers, it refuses jinja2 older than 3.1.6 (known sandbox escapes; templates are untrusted)."""
    version = tuple(int(part) for part in jinja2.__version__.split(".")[:3] if part.isdigit())
    if version < MIN_JINJA2:
        raise EnvironmentProblem(f"chat templates need jinja2 >= 3.1.6 (sandbox fixes), found {jinja2.__version__}",
                                 hint="pip install -U 'jinja2>=3.1.6'")
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationExtension, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _Namespace
    return env


def prepare_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The messages as transformers hands them to the template: fresh dicts without null-valued keys,
    reasoning aliased (see the module docstring).  Nested values are shared, never modified."""
    prepared = []
    for message in messages:
        kept = {key: value for key, value in message.items() if value is not None}
        reasoning = next((kept[key] for key in REASONING_FIELDS if kept.get(key) is not None), None)
        if reasoning is not None:
            kept = {"thinking": reasoning, **kept, "reasoning_content": reasoning}
        prepared.append(kept)
    return prepared


class Renderer:
    """A template compiled once, rendering prepared messages (:func:`prepare_messages`)."""

    def __init__(self, template: ChatTemplate, template_kwargs: Mapping[str, Any] | None = None):
        self.template = template
        self.markers = template.has_generation_markers
        try:
            self._compiled = make_environment().from_string(template.text)
        except jinja2.exceptions.TemplateError as e:
            raise ConfigError(f"{template.origin}: the chat template does not compile: {e}") from None
        self._variables = {**template.special_tokens, **dict(template_kwargs or {})}

    def render(self, messages: Sequence[Mapping[str, Any]], tools: Tools = None) -> Rendered:
        """Prepare and render one conversation; raises ChatTemplateError when the template refuses it.
        ``tools``: the JSON schemas of the tools offered (apply_chat_template's ``tools``), or None."""
        prepared = prepare_messages(messages)
        if self.markers:
            return self.render_tracked(prepared, tools)
        return Rendered(self.render_prepared(prepared, tools))

    def render_prepared(self, prepared: list[dict[str, Any]], tools: Tools = None) -> str:
        """The text of already prepared messages (no generation spans)."""
        try:
            return self._compiled.render(self._context(prepared, tools))
        except Exception as e:  # the template is code run on the data: any failure refuses this conversation
            raise ChatTemplateError(_describe(e)) from None

    def _context(self, prepared: list[dict[str, Any]], tools: Tools) -> dict[str, Any]:
        return {"messages": prepared, "tools": tools, "documents": None, "add_generation_prompt": False,
                **self._variables}

    def render_tracked(self, prepared: list[dict[str, Any]], tools: Tools = None) -> Rendered:
        """The text of prepared messages and the spans of its ``{% generation %}`` blocks."""
        blocks: list[str] = []
        with _tracking() as tracker:
            try:
                for block in self._compiled.generate(self._context(prepared, tools)):
                    blocks.append(block)
                    tracker.length += len(block)
            except Exception as e:  # as in render_prepared
                raise ChatTemplateError(_describe(e)) from None
        return Rendered("".join(blocks), tracker.spans)


@contextmanager
def _tracking() -> Iterator[_Tracker]:
    tracker = _Tracker()
    token = _TRACKING.set(tracker)
    try:
        yield tracker
    finally:
        _TRACKING.reset(token)


def _describe(e: Exception) -> str:
    if isinstance(e, jinja2.exceptions.TemplateError):
        return str(e) or type(e).__name__
    return f"{type(e).__name__}: {e}"
