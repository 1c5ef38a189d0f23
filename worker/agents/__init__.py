"""Agents' own compaction requests, served by the verified pipeline in the agent's template.

recognize.py says which chat requests are opencode's or pi's compaction (or forced by header),
blob.py parses their `<conversation>` blob back into messages, compactor.py runs the pipeline
with rolling state per session, template.py renders the typed sections in the agent's headings.
The HTTP side is worker/http/agent_chat.py (and worker/http/responses.py for Codex).
claude_code.py is glue for an agent that cannot hand its compaction over whole: the hooks
`compactd hook claude-code` answers around Claude Code's own summary.
"""

from .compactor import (
           AgentCompaction,
           AgentCompactor,
           AgentWait,
           NothingToCompact,
           Refinement,
           received_session,
)
from .recognize import AgentRequest, recognize

__all__ = ["AgentCompaction", "AgentCompactor", "AgentRequest", "AgentWait", "NothingToCompact", "Refinement",
           "received_session", "recognize"]
