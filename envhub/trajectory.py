"""The versioned trajectory format: pydantic models, a crash-safe JSONL writer, a reader.

One JSON line per episode (docs/architecture.md). The writer appends and flushes one line per
record, so a rollout killed at any instant leaves at most one unfinished last line.

A *complete record* is a line that parses as a JSON object. Every line but the last ends
in a newline; a last line without one is complete if it parses (the write stopped just
before its newline) and *torn* if it does not. The reader, the resume planner and the
writer share this one definition (:func:`_parse_record`): the reader yields a complete
unterminated last record and skips a torn one, and the writer, when it opens the file,
terminates the first and cuts off the second, so nothing the planner counted is lost.

A file may hold several records of one (task_id, sample_index) while a resumed run
re-runs masked episodes; the latest one counts (:func:`latest_records`), and
:func:`compact_trajectories` rewrites the file with only those.

Token data (per turn, for trainer adapters). ``prompt_token_ids`` are the ids the model
server tokenized the whole prompt of that call into, ``completion_token_ids`` the ids it
sampled (these are the model's tokens: the only ones a policy-gradient loss applies to),
and ``completion_logprobs[i]`` the server's logprob of ``completion_token_ids[i]``. All
three are copied from the server's reply (vLLM: ``logprobs=true`` +
``return_token_ids=true``); envhub never re-tokenizes text to fill them, so they are
``None`` when the server did not return them. ``prefix_ok`` says whether this turn's
prompt ids start with the previous turn's prompt + completion ids: when it holds for
every turn, the last turn's prompt + completion is one token sequence in which the
spans of each turn's completion ids are the model's tokens and the rest (tool results,
chat-template glue) are not; when it breaks (the chat template re-rendered history
differently), a trainer must treat each turn as its own sample.

User turns (an environment answering a final answer with the next user message,
:meth:`~envhub.Environment.next_user_turn`) are ``user`` messages in ``messages`` after
that step's tool results; like tool results they are never the model's tokens (in token
data they belong to the next turn's prompt). ``tools`` are the tools offered at the start;
a turn whose tools a user turn changed records the new full list (:attr:`Turn.tools`),
and :meth:`Trajectory.turn_tools` gives the list in force at each turn. ``Turn.endpoint``
is the model server that served the call (sticky routing keeps an episode on one).
``Turn.policy_version`` is the weight version that sampled the turn (the server's report
where it gives one, else the trainer's), and ``Turn.completion_versions`` one version per
completion id when a weight update split the call (:meth:`Turn.token_versions`). A tool
result in ``messages`` carries ``is_error`` and ``truncated``
(:meth:`envhub.types.Observation.to_message`), which policies drop before a chat API sees
the messages (:func:`envhub.types.chat_message`). Files written before these fields existed
load unchanged (all are optional, ``schema_version`` 1; readers such as the viewer guess
the two flags from the text only where a message lacks them).

Turn-level rewards: ``Turn.reward`` is what the environment gave for the step that model
call led to (:meth:`envhub.Environment.turn_reward`), ``None`` where it gave none (and in
files written before the field existed); ``Trajectory.reward`` stays the episode's final
reward. A tree child's stored suffix carries its own turns' rewards, and its shared
prefix's come back with the parent's turns. A masked trajectory keeps the rewards of the
turns it played, for the viewer; trainers never train on them.

Pins (:class:`EnvRef`: the environment's distribution, its version and the task set's
hash) were added the same way, so ``schema_version`` stays 1: every new field is optional
with a ``None`` default, so a file written before them validates unchanged, and the
readers of older envhub versions ignore fields they do not know (pydantic's default), so
a new file still loads there. A version bump would make every older reader refuse every
new file (the viewer refuses an unknown ``schema_version``) for no field it needs; it is
kept for a change that old readers would misread.

Trees (:mod:`envhub.rollout.tree`) are that change: ``schema_version`` 2. A tree rollout
forks a live episode; each of its records is one root-to-leaf episode and carries
``tree_id`` (the root's ``trajectory_id``), ``parent_id`` (the trajectory it was forked
from; ``None`` for the root), ``branch_turn`` and ``branch_message`` (how many turns and
messages it shares with its parent) and ``tree_size`` (how many records the tree has).
In the file a child's record stores only its own part, ``messages[branch_message:]`` and
``turns[branch_turn:]``, with ``schema_version`` 2 so that an older reader refuses it
instead of reading a suffix as a whole episode; every other record keeps version 1. A
tree's records are written together, parents first, by one write
(:meth:`TrajectoryWriter.write_tree`). :func:`read_records`, :func:`latest_records` and
:func:`read_trajectories` give every record whole again (version 1, its shared prefix
copied from its parent), and skip a tree that has fewer than ``tree_size`` records (what
a writer killed in the middle of a tree leaves; ``--resume`` runs that tree again and
compaction drops it), so exports and trainers see full trajectories and never part of
a tree.

Context compaction (:mod:`envhub.rollout.compaction`) is additive, ``schema_version`` 1:
``messages`` stay the whole conversation as it happened, and each compaction is a
:class:`Compaction` in ``compactions`` saying before which turn it happened and which
messages replaced the model's context there. Compaction ``k`` starts segment ``k + 1``;
the model's context in a segment is its compaction's ``messages`` followed by
``messages[message_index:]`` (:meth:`Trajectory.segment_context`), and its first turn has
``prefix_ok`` ``None``, since its prompt does not extend the previous turn's. Trainers
build one row per segment (:mod:`envhub.trainers.token_rows`). A file without the field
reads as before: ``compactions`` is ``None``, one segment.
"""

from __future__ import annotations

import bisect
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Final, Literal

from pydantic import BaseModel, Field
from pydantic_core import PydanticSerializationError

from envhub.errors import InvalidRequest
from envhub.model_text import valid_text
from envhub.types import EnvironmentInfo, Message, StopReason

__all__ = [
    "SCHEMA_VERSION",
    "Compaction",
    "EnvRef",
    "ErrorInfo",
    "SessionCall",
    "SummaryCall",
    "Timings",
    "Trajectory",
    "TrajectoryMetrics",
    "TrajectoryWriter",
    "Turn",
    "Usage",
    "compact_trajectories",
    "export_trajectories",
    "latest_records",
    "read_records",
    "read_trajectories",
    "restore_prefix",
]

SCHEMA_VERSION: Final = 2
"""The newest record format this envhub reads (2: a tree child storing only its suffix)."""


class EnvRef(BaseModel):
    """The environment an episode ran on, and its pins: what a rerun must match to be the
    same experiment.

    ``version`` is the environment's own (its class attribute, else its distribution's);
    ``distribution`` and ``distribution_version`` are the installed plugin that registers
    it (``pip install envhub-rl-calc==0.2.0`` installs it again), and ``task_set_hash``
    the :meth:`~envhub.TaskSet.content_hash` of the task set the run drew from (every
    task of the environment with the run's options). On a server they are the server's.
    ``None``: not known (a ``module:Class`` outside any distribution; a server's task set
    with client options; a file written before envhub 0.2.0)."""

    name: str
    version: str = Field(description="the environment's own version (its class's, else "
                         "its distribution's; \"unknown\" when it could not be asked)")
    distribution: str | None = Field(
        None, description="the distribution that registers the environment (envhub-rl-calc)"
    )
    distribution_version: str | None = Field(
        None, description="its version: what `envhub rollout NAME==VERSION` pins"
    )
    task_set_hash: str | None = Field(
        None, description="\"sha256:<hex>\" of the task set the run drew from: every task "
        "with the run's options, whole and in order, as canonical JSON"
    )

    @classmethod
    def of(cls, name: str, info: EnvironmentInfo) -> EnvRef:
        """The reference to record for the environment ``info`` describes, named ``name``
        (the name the run used for it)."""
        return cls(
            name=name,
            version=info.version,
            distribution=info.distribution,
            distribution_version=info.distribution_version,
            task_set_hash=info.task_set_hash,
        )

    def pins(self) -> str:
        """One line naming the pins, for messages and tables:
        ``calc (envhub-rl-calc 0.2.0), tasks sha256:cb6d7e67c88b…``."""
        if self.distribution:
            where = f"{self.distribution} {self.distribution_version}"
        else:
            where = f"version {self.version}, no distribution"
        tasks = self.task_set_hash[:19] + "…" if self.task_set_hash else "no task-set hash"
        return f"{self.name} ({where}), tasks {tasks}"


class ErrorInfo(BaseModel):
    """Why an episode was masked: ``kind`` is an envhub error code or an exception name."""

    kind: str
    message: str


class Turn(BaseModel):
    """One model call of the episode (see the module docstring for the token fields)."""

    message_index: int = Field(description="index in `messages` of the assistant message")
    finish_reason: str | None = None
    latency_s: float
    policy_version: int | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_logprobs: list[float] | None = None
    prefix_ok: bool | None = Field(None, description="None on the first turn or without ids")
    tools: list[dict[str, Any]] | None = Field(
        None,
        description="the tools offered from this model call on, when a user turn changed "
        "them; None: those of the previous turn (the first turn's: the trajectory's tools)",
    )
    endpoint: str | None = Field(
        None, description="the model server's base URL that served this call (None: not known)"
    )
    completion_versions: list[int] | None = Field(
        None,
        description="the weight version that sampled each completion id, set only when a "
        "weight update split the call (policy_version is then the first token's)",
    )
    reward: float | None = Field(
        None, allow_inf_nan=False,
        description="the environment's reward for the step this model call led to "
        "(Environment.turn_reward, StepResult.turn_reward); None: none was given. The "
        "episode's own reward is Trajectory.reward",
    )

    def token_versions(self) -> list[int | None]:
        """The weight version of each completion id: ``completion_versions`` where an
        update split the call, else ``policy_version`` for every id."""
        if self.completion_versions is not None:
            return list(self.completion_versions)
        return [self.policy_version] * len(self.completion_token_ids or [])


class SummaryCall(BaseModel):
    """The model call that wrote a compaction's summary (``summarize`` strategy)."""

    model: str
    text: str = Field(description="the summary as it entered the context")
    latency_s: float
    prompt_tokens: int = 0
    completion_tokens: int = 0
    endpoint: str | None = None


class Compaction(BaseModel):
    """One context compaction: before model call ``turn`` the model's context was
    replaced by ``messages``, starting a new segment (module docstring)."""

    turn: int = Field(ge=1, description="index in `turns` of the first turn of the new segment")
    message_index: int = Field(
        ge=0, description="len(messages) at the compaction: the model's context from here on "
        "is `messages` (below) + the trajectory's messages[message_index:]"
    )
    strategy: str = Field(description="the registered strategy that compacted")
    trigger: str = Field(description="the threshold that was passed: turns:N or tokens:N")
    replaced_messages: int = Field(ge=0, description="messages of the context it replaced")
    tokens_before: int | None = Field(
        None, description="prompt + completion tokens of the last call before it (None: the "
        "server reported none)"
    )
    messages: list[Message] = Field(description="the context the new segment starts from")
    summary: SummaryCall | None = None

    def context(self, conversation: Sequence[Message]) -> list[Message]:
        """The model's context in this compaction's segment, given the whole
        ``conversation`` so far: the compacted messages, then what came after them."""
        return [*self.messages, *conversation[self.message_index :]]


class SessionCall(BaseModel):
    """One tool call as the session ran it, whoever sent it (:attr:`Trajectory.session_calls`)."""

    name: str
    arguments: str | dict[str, Any]
    content: str = Field(description="the observation the session answered")
    is_error: bool = False
    turn: int | None = Field(
        description="index in `turns` of the model call whose reply asked for this call; "
        "None: no model call did (the agent's own code, or another client of the session)"
    )


class TrajectoryMetrics(BaseModel):
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    errors_by_kind: dict[str, int] = Field(default_factory=dict)
    episode_attempts: int = Field(1, description="1 + episode retries after env failures")
    retried_errors: dict[str, int] = Field(
        default_factory=dict, description="error kinds of the failed attempts that were retried"
    )


class Timings(BaseModel):
    llm_s: float = 0.0
    env_s: float = 0.0
    total_s: float = 0.0


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class Trajectory(BaseModel):
    """One episode. ``reward`` is ``None`` exactly when ``masked`` (an infra failure).
    In memory a trajectory is always whole (``schema_version`` 1); the tree fields are
    set on a tree rollout's episodes (module docstring)."""

    schema_version: Literal[1, 2] = 1
    trajectory_id: str
    group_id: str
    task_id: str
    sample_index: int
    env: EnvRef
    served_by: str | None = Field(
        None, description="the replica or server URL of the last attempt; None in-process"
    )
    model: str
    sampling: dict[str, Any] = Field(default_factory=dict)
    messages: list[Message]
    tools: list[dict[str, Any]] = Field(default_factory=list)
    turns: list[Turn] = Field(default_factory=list)
    session_calls: list[SessionCall] | None = Field(
        None,
        description="every tool call the session ran, in order, from the session's own log, "
        "where something other than the rollout loop stepped it (an external agent over MCP: "
        "`messages` are the agent's and need not show them all); None: `messages` are the record",
    )
    reward: float | None = None
    reward_components: dict[str, float] = Field(default_factory=dict)
    reward_info: dict[str, Any] = Field(
        default_factory=dict,
        description="the reward's free-form details (Reward.info): a judge's prompt, "
        "output, model and latency under `judges` (envhub.rewards.judge)",
    )
    stop_reason: StopReason | None = None
    error: ErrorInfo | None = None
    masked: bool = False
    metrics: TrajectoryMetrics = Field(default_factory=TrajectoryMetrics)
    timings: Timings = Field(default_factory=Timings)
    usage: Usage = Field(default_factory=Usage)
    tree_id: str | None = Field(
        None, description="the tree rollout this episode belongs to: its root's trajectory_id"
    )
    parent_id: str | None = Field(
        None, description="the trajectory this one was forked from (None: the tree's root)"
    )
    branch_turn: int | None = Field(
        None, ge=0, description="turns shared with the parent: forked after its turn "
        "branch_turn (counted from 1); turns[branch_turn:] are this episode's own"
    )
    branch_message: int | None = Field(
        None, ge=0, description="messages shared with the parent; messages[branch_message:] "
        "are this episode's own"
    )
    tree_size: int | None = Field(
        None, ge=1, description="how many trajectories (leaves) the tree has"
    )
    gold_prefix_turns: int = Field(
        0, ge=0, description="the first gold_prefix_turns turns were replayed from the task's "
        "gold actions (a restart from a gold prefix), not sampled: trainers mask them"
    )
    compactions: list[Compaction] | None = Field(
        None, description="the context compactions, in order (None: never compacted); "
        "compaction k starts segment k + 1"
    )

    def segment_starts(self) -> list[int]:
        """The index in ``turns`` of each segment's first turn (``[0]`` without compaction)."""
        return [0, *(c.turn for c in self.compactions or [])]

    def segment_of(self, turn: int) -> int:
        """The segment that holds turn ``turn`` (its index in ``turns``)."""
        return bisect.bisect_right(self.segment_starts(), turn) - 1

    def segment_turns(self, turn: int) -> range:
        """The indexes in ``turns`` of the segment that holds turn ``turn``."""
        starts = self.segment_starts()
        segment = self.segment_of(turn)
        end = starts[segment + 1] if segment + 1 < len(starts) else len(self.turns)
        return range(starts[segment], end)

    def segment_context(self, segment: int) -> tuple[list[Message], int]:
        """The model's context in ``segment``, as messages, and the shift that maps a turn's
        :attr:`Turn.message_index` into it (its index there is ``message_index + shift``)."""
        if segment == 0:
            return self.messages, 0
        compaction = (self.compactions or [])[segment - 1]
        shift = len(compaction.messages) - compaction.message_index
        return compaction.context(self.messages), shift

    def turn_tools(self) -> list[list[dict[str, Any]]]:
        """The tools in force at each turn (``tools``, replaced where a turn records a
        change: :attr:`Turn.tools`)."""
        in_force = self.tools
        per_turn = []
        for turn in self.turns:
            if turn.tools is not None:
                in_force = turn.tools
            per_turn.append(in_force)
        return per_turn


def _record_line(trajectory: Trajectory) -> bytes:
    """One record as a line of UTF-8. The messages keep a model's calls as it made them,
    and an in-process policy's can hold unpaired surrogates, which UTF-8 cannot carry
    (the session refused those calls): such a record is written with each one as
    U+FFFD, as every transport sends them, rather than lost."""
    try:
        return trajectory.model_dump_json().encode() + b"\n"
    except PydanticSerializationError:
        text = json.dumps(
            trajectory.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":")
        )  # compact, as model_dump_json writes every other record
        return valid_text(text).encode() + b"\n"


def _stored(trajectory: Trajectory) -> Trajectory:
    """A trajectory as its file stores it: a tree child keeps its own suffix only."""
    if trajectory.parent_id is None or trajectory.branch_turn is None:
        return trajectory
    return trajectory.model_copy(update={
        "schema_version": 2,
        "messages": trajectory.messages[trajectory.branch_message or 0:],
        "turns": trajectory.turns[trajectory.branch_turn:],
    })


class TrajectoryWriter:
    """Append-only JSONL writer: one ``write`` + ``flush`` per record.

    Opening repairs the end of an existing file (see the module docstring): a complete
    last record without its newline gets one, a torn one is cut, so appended records
    always start on a fresh line. ``fsync=True`` also survives a power loss, at a cost
    per record.
    """

    def __init__(self, path: str | Path, *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._fh: BinaryIO = open(self.path, "a+b")  # closed by close()
        _repair_tail(self._fh)

    def write(self, trajectory: Trajectory) -> None:
        self._append(_record_line(trajectory))

    def write_tree(self, trajectories: Sequence[Trajectory]) -> None:
        """Append a whole tree in one write: its records in order (a parent before its
        children), each child storing only what follows its branch point (module
        docstring). A kill in the middle leaves a tree the readers skip as incomplete."""
        self._append(b"".join(_record_line(_stored(t)) for t in trajectories))

    def _append(self, data: bytes) -> None:
        self._fh.write(data)
        self._fh.flush()
        if self._fsync:
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _parse_record(line: bytes) -> dict[str, Any] | None:
    """The record on ``line``, or ``None`` when it is not a complete record."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def _repair_tail(fh: BinaryIO) -> None:
    """Terminate a complete unterminated last record; cut a torn one."""
    size = fh.seek(0, os.SEEK_END)
    if size == 0:
        return
    block = 1 << 16
    pos = size
    while pos > 0:
        start = max(0, pos - block)
        fh.seek(start)
        chunk = fh.read(pos - start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            end = start + newline + 1
            break
        pos = start
    else:
        end = 0
    if end != size:
        fh.seek(end)
        if _parse_record(fh.read()) is not None:
            fh.write(b"\n")  # "a+b" appends at the end whatever the position
        else:
            fh.truncate(end)
    fh.seek(0, os.SEEK_END)


def _lines(path: str | Path) -> Iterator[tuple[int, bytes, dict[str, Any]]]:
    """(byte offset, raw line, record) of every complete record of a file."""
    with open(path, "rb") as fh:
        lineno = offset = 0
        for raw in fh:
            lineno += 1
            at, offset = offset, offset + len(raw)
            if not raw.strip():
                continue
            record = _parse_record(raw)
            if record is None:
                if not raw.endswith(b"\n") and not fh.read(1):
                    return  # the torn last line of a killed writer
                raise InvalidRequest(f"{path}:{lineno}: not a JSON record")
            yield at, raw, record


def read_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """Records of a trajectory file, in file order, each whole (a tree child's shared
    prefix restored, a tree only once all its records are read, an incomplete tree
    skipped: module docstring); a torn last line is skipped.

    Raises :class:`InvalidRequest` for a bad line that is not the last one: that is
    corruption, not a crash mid-write, and must not pass silently.
    """
    return _whole(path, (record for _, _, record in _lines(path)))


def _whole(path: str | Path, records: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """``records`` with each tree's held back until it is complete, then given whole."""
    trees: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        tree_id = record.get("tree_id")
        if tree_id is None:
            yield record
            continue
        members = trees.setdefault(str(tree_id), [])
        members.append(record)
        if len(members) >= _tree_size(path, record):
            del trees[str(tree_id)]
            yield from _rebuilt(path, members)


def _tree_size(path: str | Path, record: dict[str, Any]) -> int:
    size = record.get("tree_size")
    if type(size) is not int or size < 1:
        raise InvalidRequest(f"{path}: a tree record without a valid tree_size: {size!r}")
    return size


def _rebuilt(path: str | Path, members: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """A complete tree's records, each child's shared prefix copied from its parent."""
    whole: dict[str, dict[str, Any]] = {}
    for record in members:
        if record.get("schema_version") == 2:
            parent = whole.get(str(record.get("parent_id")))
            if parent is None:
                raise InvalidRequest(
                    f"{path}: tree {record.get('tree_id')!r} has a child record without "
                    "its parent before it"
                )
            record = restore_prefix(record, parent)
        whole[str(record.get("trajectory_id"))] = record
        yield record


def restore_prefix(record: dict[str, Any], parent: dict[str, Any]) -> dict[str, Any]:
    """A stored tree child (``schema_version`` 2) made whole with its ``parent``'s
    (whole) record: the messages and turns before its branch point copied from it."""
    turns, messages = record.get("branch_turn"), record.get("branch_message")
    if type(turns) is not int or type(messages) is not int or min(turns, messages) < 0:
        raise InvalidRequest(f"a tree child record without its branch point: {turns!r}")
    return {
        **record,
        "schema_version": 1,
        "messages": list(parent.get("messages") or [])[:messages]
        + list(record.get("messages") or []),
        "turns": list(parent.get("turns") or [])[:turns] + list(record.get("turns") or []),
    }


def _latest_offsets(path: str | Path) -> tuple[set[int], int]:
    """Offsets of the latest record of each (task_id, sample_index) and of every record
    of the latest complete tree of each (task_id, group_id), and how many records the
    file holds in all."""
    latest: dict[tuple[str, int], int] = {}
    trees: dict[str, list[int]] = {}
    latest_tree: dict[tuple[str, str], str] = {}
    total = 0
    for at, _, record in _lines(path):
        try:
            tree_id = record.get("tree_id")
            if tree_id is None:
                latest[(record["task_id"], record["sample_index"])] = at
            else:
                offsets = trees.setdefault(str(tree_id), [])
                offsets.append(at)
                if len(offsets) == _tree_size(path, record):
                    latest_tree[(record["task_id"], record["group_id"])] = str(tree_id)
        except (KeyError, TypeError):
            raise InvalidRequest(f"{path}: the record at byte {at} is not a trajectory") from None
        total += 1
    keep = set(latest.values())
    for tree_id in latest_tree.values():
        keep.update(trees[tree_id])
    return keep, total


def latest_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """The latest record of each (task_id, sample_index) of a file, and the latest
    complete tree of each tree group, in file order and whole: what a resumed run's
    file means once its re-run episodes replace their masked records."""
    keep, _ = _latest_offsets(path)
    return _whole(path, (record for at, _, record in _lines(path) if at in keep))


def compact_trajectories(path: str | Path) -> int:
    """Rewrite ``path`` with only its latest record per (task_id, sample_index) and its
    latest complete tree per tree group; returns how many records were dropped. The new
    file replaces the old one atomically (a crash leaves one or the other), and a file
    without repeats is not touched."""
    path = Path(path)
    keep, total = _latest_offsets(path)
    if len(keep) == total:
        return 0
    temporary = path.with_name(f"{path.name}.compacting")
    with open(temporary, "wb") as out:
        for at, raw, _ in _lines(path):
            if at in keep:
                out.write(raw if raw.endswith(b"\n") else raw + b"\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    return total - len(keep)


def read_trajectories(path: str | Path) -> Iterator[Trajectory]:
    """Validated trajectories of a file (see :func:`read_records` for torn lines)."""
    for record in read_records(path):
        yield Trajectory.model_validate(record)


# Fields whose shape depends on the environment or the provider: exported as JSON text so
# that one Arrow schema fits every environment (decode with ``json.loads``).
_JSON_COLUMNS = ("messages", "tools", "sampling", "reward_components", "reward_info")


def export_trajectories(
    path: str | Path, output: str | Path, fmt: Literal["parquet", "jsonl"]
) -> int:
    """Export a trajectory file for ``datasets.load_dataset``; returns the row count.

    Fixed-shape fields (turns with token ids, metrics, timings, usage, error) stay typed
    columns; ``messages``, ``tools``, ``sampling``, ``reward_components``, ``reward_info``,
    ``metrics.errors_by_kind``, ``metrics.retried_errors``, a turn's changed ``tools``,
    ``session_calls`` and ``compactions`` become JSON strings (a turn's ``tools`` stays
    null where they did not change, ``session_calls`` and ``compactions`` where the
    trajectory has none).
    """
    import datasets

    rows = []
    for trajectory in read_trajectories(path):
        row = trajectory.model_dump(mode="json")
        for column in _JSON_COLUMNS:
            row[column] = json.dumps(row[column], ensure_ascii=False)
        for counts in ("errors_by_kind", "retried_errors"):
            row["metrics"][counts] = json.dumps(row["metrics"][counts])
        for turn in row["turns"]:
            if turn["tools"] is not None:
                turn["tools"] = json.dumps(turn["tools"], ensure_ascii=False)
        if row["session_calls"] is not None:  # arguments are a string or an object
            row["session_calls"] = json.dumps(row["session_calls"], ensure_ascii=False)
        if row["compactions"] is not None:  # each holds the messages of a context
            row["compactions"] = json.dumps(row["compactions"], ensure_ascii=False)
        rows.append(row)
    features = _export_features()
    dataset = datasets.Dataset.from_list(rows, features=features)
    if fmt == "parquet":
        dataset.to_parquet(str(output))
    elif fmt == "jsonl":
        dataset.to_json(str(output), lines=True)
    else:
        raise InvalidRequest(f"unknown export format {fmt!r}: use parquet or jsonl")
    return len(rows)


def _export_features() -> Any:
    """The explicit Arrow schema of exported rows (explicit, so empty or all-null columns
    such as token ids from a server that returns none still get their real types)."""
    from datasets import Features, Sequence, Value

    turn = {
        "message_index": Value("int64"),
        "finish_reason": Value("string"),
        "latency_s": Value("float64"),
        "policy_version": Value("int64"),
        "prompt_token_ids": Sequence(Value("int64")),
        "completion_token_ids": Sequence(Value("int64")),
        "completion_logprobs": Sequence(Value("float64")),
        "completion_versions": Sequence(Value("int64")),
        "prefix_ok": Value("bool"),
        "tools": Value("string"),
        "endpoint": Value("string"),
        "reward": Value("float64"),
    }
    return Features(
        {
            "schema_version": Value("int64"),
            "trajectory_id": Value("string"),
            "group_id": Value("string"),
            "task_id": Value("string"),
            "sample_index": Value("int64"),
            "env": {
                "name": Value("string"),
                "version": Value("string"),
                "distribution": Value("string"),
                "distribution_version": Value("string"),
                "task_set_hash": Value("string"),
            },
            "served_by": Value("string"),
            "model": Value("string"),
            "sampling": Value("string"),
            "messages": Value("string"),
            "tools": Value("string"),
            "turns": [turn],
            "session_calls": Value("string"),
            "reward": Value("float64"),
            "reward_components": Value("string"),
            "reward_info": Value("string"),
            "stop_reason": Value("string"),
            "error": {"kind": Value("string"), "message": Value("string")},
            "masked": Value("bool"),
            "metrics": {
                "turns": Value("int64"),
                "tool_calls": Value("int64"),
                "tool_errors": Value("int64"),
                "errors_by_kind": Value("string"),
                "episode_attempts": Value("int64"),
                "retried_errors": Value("string"),
            },
            "timings": {
                "llm_s": Value("float64"),
                "env_s": Value("float64"),
                "total_s": Value("float64"),
            },
            "usage": {"prompt_tokens": Value("int64"), "completion_tokens": Value("int64")},
            "tree_id": Value("string"),
            "parent_id": Value("string"),
            "branch_turn": Value("int64"),
            "branch_message": Value("int64"),
            "tree_size": Value("int64"),
            "gold_prefix_turns": Value("int64"),
            "compactions": Value("string"),
        }
    )
