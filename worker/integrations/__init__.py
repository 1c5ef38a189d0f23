"""Glue for agents that cannot hand their compaction over whole: hooks they run around their own."""
