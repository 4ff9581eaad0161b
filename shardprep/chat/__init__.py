"""Chat conversations -> rendered text -> token ids and trained token ranges (issue 28's core).

``conversations.py`` reads a record's conversation, ``template.py`` finds the chat template,
``render.py`` renders it as transformers does, ``attribution.py`` and ``spans.py`` decide which characters
are trained, ``tokens.py`` turns them into token ranges, ``encoder.py`` ties them together
(:class:`ChatEncoder`).  Only jinja2 beyond the core: transformers is never imported here.
"""

from shardprep.chat.conversations import ChatRecordError, chat_field_of, conversation_from_record
from shardprep.chat.encoder import ChatEncoder, EncodedConversation
from shardprep.chat.render import ChatTemplateError, Rendered, Renderer
from shardprep.chat.spans import MODES, SpanRule, TrainedText
from shardprep.chat.template import ChatTemplate, load_chat_template

__all__ = ["MODES", "ChatEncoder", "ChatRecordError", "ChatTemplate", "ChatTemplateError", "EncodedConversation",
           "Rendered", "Renderer", "SpanRule", "TrainedText", "chat_field_of", "conversation_from_record",
           "load_chat_template"]
