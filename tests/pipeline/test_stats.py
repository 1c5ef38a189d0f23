"""A checkpoint's figures are typed records (worker/pipeline/stats.py) whose dicts are the JSON
the store and the API held before: a real compaction round-trips unchanged, and what an older
store holds (keys missing, keys no longer written) still loads."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest

from backends.base import GenerationStats
from tests.fakes import ScriptedBackend, work_session
from worker.pipeline import CompactionConfig, compact
from worker.pipeline.checkpoint import Checkpoint
from worker.pipeline.stats import (
    CheckpointAudit,
    CheckpointTokens,
    DroppedMessage,
    ModelCall,
    PrunedOutput,
    Removal,
    Timings,
)
from worker.service.store import Store

# Every prune candidate is committed, so `audit.pruned` is not empty.
CONFIG = CompactionConfig(context_limit=6_000, reserved=500, prune_protect=0, prune_minimum=0)
SESSION = work_session(turns=14, words=120)


@pytest.fixture(scope="module")
def compaction():
    backend = ScriptedBackend()  # its scripted narrative names a file the session never mentions
    try:
        yield compact(SESSION, backend, CONFIG)
    finally:
        backend.close()


def test_a_real_compaction_round_trips_to_the_same_json(compaction):
    cp = compaction.checkpoint
    d = cp.to_dict()
    # Every figure is there, so the round trip covers each record's shape.
    assert cp.timings.model and cp.verification.removed and cp.audit.dropped and cp.audit.pruned
    assert json.loads(json.dumps(d)) == d  # plain JSON values: lists, not tuples
    again = Checkpoint.from_dict(json.loads(json.dumps(d)))
    assert again == cp
    assert json.dumps(again.to_dict()) == json.dumps(d)  # same keys in the same order


def test_the_json_keeps_the_shape_readers_know(compaction):
    cp, d = compaction.checkpoint, compaction.checkpoint.to_dict()
    assert list(d["tokens"]) == ["before", "after", "summary", "tail", "system", "projected"]
    assert list(d["budget"]) == ["context_limit", "reserved", "usable", "summary_limit", "tail_budget"]
    assert list(d["verification"]) == ["removed", "fallback", "problems"]
    assert list(d["verification"]["removed"][0]) == ["section", "text", "reason"]
    assert list(d["timings"]) == ["stages_ms", "model", "narrative_left_out"]
    assert list(d["timings"]["model"][0]) == list(GenerationStats().to_dict())  # a model call is its stats record
    assert list(d["audit"]) == ["dropped", "pruned", "prune", "split_turn_start", "summary_version"]
    assert list(d["audit"]["dropped"][0]) == ["id", "tokens"]
    assert list(d["audit"]["pruned"][0]) == ["message_id", "call_id", "tool", "tokens"]
    # Attributes read what the dicts hold.
    assert d["tokens"]["after"] == cp.tokens.after < cp.tokens.before == d["tokens"]["before"]
    assert d["timings"]["model"][0]["decode_tps"] == cp.timings.model[0].decode_tps > 0
    assert d["audit"]["dropped"][0] == {"id": cp.audit.dropped[0].id, "tokens": cp.audit.dropped[0].tokens}
    assert "serializers.py" in cp.verification.removed[0].text  # the scripted goal names a file not in the session


def test_keys_set_after_the_pipeline_are_written_only_once_set(compaction):
    cp = compaction.checkpoint
    committed = replace(cp, audit=replace(cp.audit, mode="refined", summary_version=4, refines=3))
    audit = committed.to_dict()["audit"]
    assert list(audit)[-3:] == ["summary_version", "mode", "refines"] and audit["refines"] == 3
    assert Checkpoint.from_dict(committed.to_dict()).audit.refines == 3
    rolled = replace(cp.audit, mode="swap", rolling_boundary="m0012").to_dict()
    assert rolled["rolling_boundary"] == "m0012" and "refines" not in rolled
    assert cp.audit.mode is None and "mode" not in cp.to_dict()["audit"]


def test_what_an_older_store_holds_still_loads(compaction, tmp_path):
    old = copy.deepcopy(compaction.checkpoint.to_dict())
    del old["tokens"]["projected"], old["tokens"]["system"]
    old["timings"] = {"stages_ms": old["timings"]["stages_ms"], "model": old["timings"]["model"], "chunks": 2}
    del old["timings"]["model"][0]["cached_prompt_tokens"]
    old["timings"]["model"][0]["engine_note"] = "a key no release wrote"
    old["audit"]["mode"] = "sync"
    del old["audit"]["split_turn_start"]
    del old["verification"]["problems"]
    with Store(tmp_path / "old.db") as store:  # through SQLite, as a running service reads it
        store.create_session("s", context_limit=CONFIG.context_limit)
        store.append_messages("s", SESSION.messages)
        store.add_checkpoint("s", old, None, summary_tokens=old["tokens"]["summary"],
                             boundary_message_id=old["boundary_message_id"])
        stored = store.latest_checkpoint("s")
    assert stored is not None
    cp = Checkpoint.from_dict(stored.data)
    assert cp.tokens == replace(compaction.checkpoint.tokens, system=0, projected=0)
    assert cp.timings.narrative_left_out == 0 and cp.timings.model[0].cached_prompt_tokens == 0
    assert cp.timings.model[0].decode_tokens == compaction.checkpoint.timings.model[0].decode_tokens
    assert cp.audit.mode == "sync" and cp.audit.split_turn_start is None and cp.verification.problems == ()
    assert "chunks" not in cp.to_dict()["timings"]


def test_a_stored_dict_without_the_newer_keys_gets_defaults():
    assert CheckpointTokens.from_dict({"before": 10, "after": 4}) == CheckpointTokens(before=10, after=4)
    assert CheckpointAudit.from_dict({"dropped": [{"id": "m1", "tokens": 3}], "summary_version": 2}) == CheckpointAudit(
        dropped=(DroppedMessage("m1", 3),), summary_version=2)
    assert Timings.from_dict({}) == Timings() and Timings().to_dict() == {"stages_ms": {}, "model": [],
                                                                         "narrative_left_out": 0}
    assert ModelCall.of(GenerationStats(decode_tokens=50, decode_ms=500.0)).decode_tps == 100.0
    assert PrunedOutput.from_dict({"message_id": "m2", "call_id": "c", "tool": "bash", "tokens": 9,
                                   "extra": 1}) == PrunedOutput("m2", "c", "bash", 9)
    with pytest.raises(AttributeError):
        Removal("goal", "x", "why").text = "y"  # type: ignore[misc]  # frozen: a change is a replace
