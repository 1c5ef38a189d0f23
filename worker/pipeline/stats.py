"""A checkpoint's figures as typed records: its token counts, budget, verification, timings and audit.

Readers (the web page, the API, the CLI, the benchmarks) read attributes of frozen records, not
keys of dicts whose shape only the pipeline knew. The stored JSON is unchanged: each record's
`to_dict()` returns exactly the shape the store and every API response held before (same keys,
same order, lists where there are lists), and `from_dict()` reads what older stores hold (a
missing key gets its default, an unknown one is ignored), so checkpoints in an existing SQLite
store still load. A change is a `dataclasses.replace(...)`, never a mutation.

Every record of a checkpoint's figures lives here, the two the stages build themselves included:
`Removal` (what verification took out, verify.py) and `PrunedOutput` (a cleared tool output,
prune.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from backends.base import GenerationStats

_R = TypeVar("_R", bound="_Flat")


class _Flat:
    """to_dict / from_dict for a record of plain values, in field order."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[_R], d: Mapping[str, Any] | None) -> _R:
        d = d or {}
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- tokens and budget
@dataclass(frozen=True)
class CheckpointTokens(_Flat):
    """Token counts of one compaction: what the agent held before and holds after, the parts of
    `after` (summary, verbatim tail, system prompt) and the loop guard's projection."""

    before: int = 0
    after: int = 0
    summary: int = 0
    tail: int = 0
    system: int = 0
    projected: int = 0


@dataclass(frozen=True)
class CheckpointBudget(_Flat):
    """The window the checkpoint was fitted to."""

    context_limit: int = 0
    reserved: int = 0
    usable: int = 0
    summary_limit: int = 0
    tail_budget: int = 0


# ---------------------------------------------------------------------------- verification
@dataclass(frozen=True)
class Removal(_Flat):
    """A claim verification took out of the model's narrative, and why."""

    section: str = ""  # "goal", "key_decisions", "next_steps"
    text: str = ""
    reason: str = ""


@dataclass(frozen=True)
class Verification:
    """What verification removed, why the deterministic narrative was used ("" when it was not),
    and the junk detected in the model output."""

    removed: tuple[Removal, ...] = ()
    fallback: str = ""
    problems: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"removed": [r.to_dict() for r in self.removed], "fallback": self.fallback,
                "problems": list(self.problems)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Verification:
        d = d or {}
        return cls(removed=tuple(Removal.from_dict(r) for r in d.get("removed") or ()),
                   fallback=d.get("fallback") or "", problems=tuple(d.get("problems") or ()))


# ---------------------------------------------------------------------------- timings
@dataclass(frozen=True)
class ModelCall(_Flat):
    """One model call as stored: `GenerationStats.to_dict()` (backends/base.py), its two rates
    included. The engine's live record and this stored one share their fields on purpose; the
    stored record is frozen and reads old rows (tests/pipeline/test_stats.py keeps them in step)."""

    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    prompt_ms: float = 0.0
    decode_tokens: int = 0
    decode_ms: float = 0.0
    ttft_ms: float = 0.0
    total_ms: float = 0.0
    peak_memory_mb: float = 0.0
    finish_reason: str = ""
    prompt_tps: float = 0.0
    decode_tps: float = 0.0

    @classmethod
    def of(cls, stats: GenerationStats) -> ModelCall:
        return cls.from_dict(stats.to_dict())


@dataclass(frozen=True)
class Timings:
    """Milliseconds per pipeline stage, the model calls, and how many messages the summarizer's
    bounded input left out."""

    stages_ms: Mapping[str, float] = field(default_factory=dict)
    model: tuple[ModelCall, ...] = ()
    narrative_left_out: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"stages_ms": dict(self.stages_ms), "model": [m.to_dict() for m in self.model],
                "narrative_left_out": self.narrative_left_out}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Timings:
        d = d or {}  # an old store's `chunks` (before the bounded input) is ignored
        return cls(stages_ms=dict(d.get("stages_ms") or {}),
                   model=tuple(ModelCall.from_dict(m) for m in d.get("model") or ()),
                   narrative_left_out=d.get("narrative_left_out") or 0)


# ---------------------------------------------------------------------------- audit
@dataclass(frozen=True)
class DroppedMessage(_Flat):
    """A message the summary replaced (no longer sent verbatim), with its token count."""

    id: str = ""
    tokens: int = 0


@dataclass(frozen=True)
class PrunedOutput(_Flat):
    """A tool output the prune stage cleared (a placeholder names it; the history keeps it)."""

    message_id: str = ""
    call_id: str = ""
    tool: str = ""
    tokens: int = 0


# The keys set after the pipeline (by the service or the agent compactor): stored only when set.
_OPTIONAL_AUDIT = ("mode", "refines", "rolling_boundary")


@dataclass(frozen=True)
class CheckpointAudit:
    """What one compaction did. The pipeline sets the first five fields; the rest are set when
    the checkpoint is committed or handed to an agent, and are absent from the JSON until then:
    `mode` ("instant", "sync", "swap" or "refined" as the service commits it, or
    "agent:<agent>:<fresh|anchored|update>"), `refines` (the instant version a refinement
    replaces), `rolling_boundary` (the boundary of the rolling summary a commit swapped in)."""

    dropped: tuple[DroppedMessage, ...] = ()
    pruned: tuple[PrunedOutput, ...] = ()
    prune: str = ""  # the prune stage's reason
    split_turn_start: str | None = None  # first message of a turn the tail cut in two
    summary_version: int = 0
    mode: str | None = None
    refines: int | None = None
    rolling_boundary: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dropped": [m.to_dict() for m in self.dropped],
                               "pruned": [p.to_dict() for p in self.pruned], "prune": self.prune,
                               "split_turn_start": self.split_turn_start, "summary_version": self.summary_version}
        out.update({k: getattr(self, k) for k in _OPTIONAL_AUDIT if getattr(self, k) is not None})
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> CheckpointAudit:
        d = d or {}
        return cls(dropped=tuple(DroppedMessage.from_dict(m) for m in d.get("dropped") or ()),
                   pruned=tuple(PrunedOutput.from_dict(p) for p in d.get("pruned") or ()),
                   prune=d.get("prune") or "", split_turn_start=d.get("split_turn_start"),
                   summary_version=d.get("summary_version") or 0,
                   **{k: d[k] for k in _OPTIONAL_AUDIT if d.get(k) is not None})


__all__ = ["CheckpointAudit", "CheckpointBudget", "CheckpointTokens", "DroppedMessage", "ModelCall",
           "PrunedOutput", "Removal", "Timings", "Verification"]
