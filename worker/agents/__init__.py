"""Agents' own compaction requests, served by the verified pipeline in the agent's template.

profiles.py is the seam: one AgentProfile per agent (how its request is recognized, how its
history is read, how its template is rendered, its preset and noise). blob.py parses the
`<conversation>` blob opencode and pi send back into messages; compactor.py runs the pipeline
with rolling state per agent session; template.py holds the pieces the templates are built of.
The service's `agent_compaction` is the one method every door calls (worker/http/agent_chat.py,
worker/http/responses.py, worker/http/gemini.py). claude_code.py is glue for an agent that cannot hand its compaction
over whole: the hooks `compactd hook claude-code` answers around Claude Code's own summary.
"""

from .compactor import AgentCompaction, AgentCompactor, AgentWait, NothingToCompact, Refinement
from .profiles import PROFILES, AgentProfile, AgentRequest, Received, recognize, register

__all__ = ["PROFILES", "AgentCompaction", "AgentCompactor", "AgentProfile", "AgentRequest", "AgentWait",
           "NothingToCompact", "Received", "Refinement", "recognize", "register"]
