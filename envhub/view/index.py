"""An on-disk index of one trajectory JSONL file: byte offset plus the few columns the
viewer filters, sorts and charts on, one row per record, in sqlite.

The file is read once, line by line, without validating whole trajectories; afterwards
every page is a query on the index, and an episode page reads one line by seeking to its
offset. The index follows a file that is still being written: :meth:`RunIndex.refresh`
reads only the bytes appended since the last call. A line counts once it ends in a
newline, or when it is the last line and parses as a record (the rule of
:mod:`envhub.trajectory`); the unfinished rest is left for the next refresh. A file
that shrank or whose first bytes changed (``compact_trajectories`` replaced it) is
indexed again from the start.

Lines that are not trajectories (not JSON, not UTF-8, an unknown ``schema_version``,
no ``task_id``, a field the viewer reads of the wrong type:
:func:`~envhub.view.record.check_record`) become :class:`Problem` rows with a code, and
the rest of the file is indexed as usual: one bad line never stops a page or a report.
As in a resumed run's file, the latest record of a (task_id, sample_index) replaces the
earlier ones (:func:`envhub.trajectory.latest_records`): earlier rows are kept but
marked superseded and left out of every query.

A refresh may be bounded (``max_bytes``) and the index committed after each one, so a
viewer answers pages while a big file is still being read (the pages say how far it
got) instead of making the first page wait for the whole file.

The index lives in ``cache_dir`` under a name derived from the file's absolute path;
it is rebuilt when :data:`INDEX_FORMAT` changes.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

from envhub._util.sized_lru import SizedLRU
from envhub.errors import InvalidRequest
from envhub.runtime.cache import locked
from envhub.trajectory import EnvRef, restore_prefix
from envhub.view.filters import EpisodeFilter, EpisodeOrder
from envhub.view.record import BadRecord, ViewedRecord, check_record

__all__ = [
    "INDEX_FORMAT", "EpisodeRow", "IndexState", "ListPlace", "Problem", "RunIndex", "TreeNode",
]  # fmt: skip

INDEX_FORMAT: Final = 5  # 4: the pins (env_distribution, task_set_hash); 5: trees
_HEAD_BYTES: Final = 4096  # how much of the file's start identifies it
_BATCH: Final = 2000
_MAX_TREE_DEPTH: Final = 1000  # ancestors followed to restore a tree child's prefix

_COLUMNS: Final = (
    "offset", "length", "line", "task_id", "sample_index", "trajectory_id", "reward", "masked",
    "stop_reason", "error_kind", "error_kinds", "tools_used", "turns", "tool_calls",
    "tool_errors", "prompt_tokens", "completion_tokens", "llm_s", "env_s", "total_s",
    "policy_version", "served_by", "has_tokens", "model", "env_name", "env_version", "retried",
    "llm_latencies", "env_distribution", "task_set_hash", "tree_id", "parent_id", "branch_turn",
)  # fmt: skip

_SCHEMA: Final = f"""
CREATE TABLE episodes (
    id INTEGER PRIMARY KEY, offset INTEGER NOT NULL, length INTEGER NOT NULL,
    line INTEGER NOT NULL, task_id TEXT NOT NULL, sample_index INTEGER NOT NULL,
    trajectory_id TEXT, reward REAL, masked INTEGER NOT NULL, stop_reason TEXT,
    error_kind TEXT, error_kinds TEXT NOT NULL, tools_used TEXT NOT NULL, turns INTEGER,
    tool_calls INTEGER, tool_errors INTEGER, prompt_tokens INTEGER, completion_tokens INTEGER,
    llm_s REAL, env_s REAL, total_s REAL, policy_version INTEGER, served_by TEXT,
    has_tokens INTEGER NOT NULL, model TEXT, env_name TEXT, env_version TEXT, retried TEXT,
    llm_latencies TEXT, env_distribution TEXT, task_set_hash TEXT,
    tree_id TEXT, parent_id TEXT, branch_turn INTEGER,
    superseded INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX episodes_pair ON episodes (task_id, sample_index);
CREATE INDEX episodes_tree ON episodes (tree_id);
CREATE INDEX episodes_trajectory ON episodes (trajectory_id);
CREATE INDEX episodes_reward ON episodes (superseded, reward);
CREATE INDEX episodes_turns ON episodes (superseded, turns);
CREATE TABLE problems (line INTEGER, offset INTEGER, code TEXT, message TEXT);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
INSERT INTO meta VALUES ('format', '{INDEX_FORMAT}');
"""


@dataclass(frozen=True)
class TreeNode:
    """One episode of a tree as the tree page draws it."""

    id: int
    trajectory_id: str | None
    parent_id: str | None
    branch_turn: int | None
    sample_index: int
    reward: float | None
    masked: bool
    turns: int


@dataclass(frozen=True)
class Problem:
    """A line of the file that is not a trajectory the viewer can show."""

    line: int
    offset: int
    code: str  # not_json | not_utf8 | unknown_schema_version | not_a_trajectory | bad_field
    message: str


@dataclass(frozen=True)
class IndexState:
    """How far the index has read: ``version`` changes whenever its content does."""

    episodes: int
    problems: int
    indexed_bytes: int
    pending_bytes: int  # an unfinished last line: torn, or still being written
    generation: int  # bumped when the file was replaced and indexed again
    file_bytes: int  # the file's size when last looked at

    @property
    def behind(self) -> bool:
        """Whether complete lines are still waiting to be indexed (a big file being read)."""
        return self.indexed_bytes + self.pending_bytes < self.file_bytes

    @property
    def version(self) -> str:
        return f"{self.generation}:{self.indexed_bytes}:{self.pending_bytes}:{self.problems}"


@dataclass(frozen=True)
class ListPlace:
    """Where one episode stands in a filtered, sorted episode list."""

    position: int  # from 1
    total: int
    previous: int | None  # the episode ids next to it in that order
    next: int | None


@dataclass(frozen=True)
class EpisodeRow:
    """One indexed trajectory (the table columns, not the conversation)."""

    id: int
    line: int
    task_id: str
    sample_index: int
    reward: float | None
    masked: bool
    stop_reason: str | None
    error_kind: str | None
    tools_used: list[str]
    turns: int
    tool_calls: int
    tool_errors: int
    tokens: int
    total_s: float
    policy_version: int | None


class RunIndex:
    """The index of one trajectory file (thread-safe: one connection behind a lock)."""

    def __init__(self, path: str | Path, cache_dir: str | Path) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise InvalidRequest(f"{self.path}: no such file", code="not_found")
        if self.path.is_dir():
            jsonl = sorted(p.name for p in self.path.glob("*.jsonl"))
            hint = f" (it holds {', '.join(jsonl[:5])})" if jsonl else ""
            raise InvalidRequest(
                f"{self.path} is a directory: give trajectory files, e.g. {self.path}/*.jsonl"
                f"{hint}",
                code="is_directory",
            )
        key = hashlib.sha1(str(self.path.resolve()).encode()).hexdigest()[:20]
        self.index_path = Path(cache_dir) / f"{self.path.stem[:40]}-{key}.sqlite"
        # private: the charts cached here are served as markup without escaping again
        self.index_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = self._connect()
        # episode lists in order, by (index version, filter, order): see place()
        self._lists: SizedLRU[tuple[str, EpisodeFilter, EpisodeOrder], array[int]] = SizedLRU(
            max_entries=8, max_bytes=32 << 20
        )

    # -- building -------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.index_path, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=OFF")
        fmt = None
        try:
            fmt = db.execute("SELECT value FROM meta WHERE key='format'").fetchone()
        except sqlite3.DatabaseError:
            pass
        if fmt is None or fmt[0] != str(INDEX_FORMAT):
            db.close()
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.index_path}{suffix}").unlink(missing_ok=True)
            db = sqlite3.connect(self.index_path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=OFF")
            db.executescript(_SCHEMA)
        return db

    def _meta(self, key: str, default: str = "") -> str:
        row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return str(row[0]) if row else default

    def _set_meta(self, **values: object) -> None:
        self._db.executemany(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)", [(k, str(v)) for k, v in values.items()]
        )

    def refresh(self, max_bytes: int | None = None) -> bool:
        """Index what was appended since the last call, or its next ``max_bytes`` (then
        :attr:`IndexState.behind` says more is waiting); True when anything changed.

        Opening a :class:`RunIndex` reads nothing: the first refresh does."""
        with self._lock, locked(self.index_path):
            try:
                with open(self.path, "rb") as fh:
                    return self._follow(fh, os.fstat(fh.fileno()), max_bytes)
            except FileNotFoundError:
                return False  # replaced right now (compaction): the next refresh sees it
            except OSError as exc:
                raise InvalidRequest(f"{self.path}: {exc.strerror}", code="unreadable") from exc
            finally:
                if self._db.in_transaction:  # failed mid-way: else every later BEGIN fails
                    self._db.execute("ROLLBACK")

    def _follow(self, fh: Any, stat: os.stat_result, max_bytes: int | None) -> bool:
        start = int(self._meta("indexed_bytes", "0"))
        head_len = int(self._meta("head_len", "0"))
        head = fh.read(head_len) if head_len else b""
        same_file = (
            self._meta("inode") == str(stat.st_ino)
            and stat.st_size >= start
            and hashlib.sha1(head).hexdigest()
            == self._meta("head_sha1", hashlib.sha1().hexdigest())
        )
        if not same_file and (start or self._meta("inode")):
            generation = int(self._meta("generation", "0")) + 1
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM episodes")
            self._db.execute("DELETE FROM problems")
            self._db.execute("DELETE FROM meta WHERE key != 'format'")
            self._set_meta(generation=generation)
            self._db.execute("COMMIT")
            start = 0
        pending = int(self._meta("pending_bytes", "0")) if same_file else 0
        if same_file and start + pending == stat.st_size and head_len >= min(start, _HEAD_BYTES):
            return False  # nothing appended (an unfinished last line is not read again)
        fh.seek(start)
        line = int(self._meta("lines", "0"))
        # the last line indexed was a complete record without its newline: the bytes that
        # follow end that line (the writer's newline), they do not start line + 1
        open_line = same_file and self._meta("open_line") == "1"
        self._db.execute("BEGIN")
        (last_id,) = self._db.execute("SELECT coalesce(max(id), 0) FROM episodes").fetchone()
        rows: list[tuple[Any, ...]] = []
        offset = start
        pending = 0
        for raw in fh:
            if not raw.endswith(b"\n"):
                if _parse(raw)[0] is None:
                    pending = len(raw)  # torn, or a line still being written
                    break
            if not open_line:
                line += 1
            open_line = not raw.endswith(b"\n")
            self._index_line(raw, offset, line, rows)
            offset += len(raw)
            if len(rows) >= _BATCH:
                self._insert(rows)
            if max_bytes is not None and offset - start >= max_bytes:
                break
        self._insert(rows)
        self._supersede(last_id)
        head_len = min(offset + pending, _HEAD_BYTES)
        fh.seek(0)
        self._set_meta(
            indexed_bytes=offset, pending_bytes=pending, lines=line, open_line=int(open_line),
            inode=stat.st_ino,
            file_bytes=max(stat.st_size, offset + pending),
            head_len=head_len, head_sha1=hashlib.sha1(fh.read(head_len)).hexdigest(),
        )  # fmt: skip
        self._db.execute("COMMIT")
        return True

    def _index_line(self, raw: bytes, offset: int, line: int, rows: list[tuple[Any, ...]]) -> None:
        if not raw.strip():
            return
        record, problem = _parse(raw)
        if record is None:
            self._db.execute("INSERT INTO problems VALUES (?, ?, ?, ?)", (line, offset, *problem))
            return
        try:
            rows.append(_columns(check_record(record), offset, len(raw), line))
        except BadRecord as exc:
            self._db.execute(
                "INSERT INTO problems VALUES (?, ?, ?, ?)", (line, offset, exc.code, str(exc))
            )

    def _insert(self, rows: list[tuple[Any, ...]]) -> None:
        if not rows:
            return
        placeholders = ", ".join("?" * len(_COLUMNS))
        self._db.executemany(
            f"INSERT INTO episodes ({', '.join(_COLUMNS)}) VALUES ({placeholders})", rows
        )
        rows.clear()

    def _supersede(self, last_id: int) -> None:
        """Mark superseded the earlier records of every pair that got a record after
        ``last_id`` (one statement, answered from the pair index)."""
        self._db.execute(
            "UPDATE episodes SET superseded=1 WHERE superseded=0"
            " AND (task_id, sample_index) IN"
            "  (SELECT task_id, sample_index FROM episodes WHERE id > ?)"
            " AND id < (SELECT max(id) FROM episodes later WHERE later.task_id=episodes.task_id"
            "  AND later.sample_index=episodes.sample_index)",
            (last_id,),
        )

    # -- queries --------------------------------------------------------------------------

    def state(self) -> IndexState:
        with self._lock:
            episodes = self._db.execute(
                "SELECT count(*) FROM episodes WHERE superseded=0"
            ).fetchone()[0]
            problems = self._db.execute("SELECT count(*) FROM problems").fetchone()[0]
            return IndexState(
                episodes=episodes,
                problems=problems,
                indexed_bytes=int(self._meta("indexed_bytes", "0")),
                pending_bytes=int(self._meta("pending_bytes", "0")),
                generation=int(self._meta("generation", "0")),
                file_bytes=int(self._meta("file_bytes", "0")),
            )

    def memo(self, key: str, compute: Callable[[], str]) -> str:
        """``compute()``, kept in the index until its content changes (for summaries that
        take a pass over every row, such as pass@k)."""
        version = self.state().version
        with self._lock:
            stored = self._meta(f"memo:{key}")
        if stored.startswith(version + "\n"):
            return stored[len(version) + 1 :]
        value = compute()
        with self._lock:
            self._set_meta(**{f"memo:{key}": f"{version}\n{value}"})
        return value

    def require_trajectories(self, *, whole_file: bool) -> None:
        """Raise ``InvalidRequest`` (``no_trajectories``) when what was read holds no
        trajectory: lines were read and none is one (a summary or a log given by mistake),
        or, with ``whole_file`` (a report, which has read the file to its end), nothing was
        there. ``envhub view`` and ``envhub report`` refuse such a file with this one
        message; the viewer leaves an empty file be (a run that has just started)."""
        state = self.state()
        if state.episodes or not (state.problems or whole_file):
            return
        if state.problems:
            first, lines = self.problems(1)[0], "line" if state.problems == 1 else "lines"
            detail = f"in {state.problems} {lines} (line {first.line}: {first.message})"
        else:
            detail = "(only an unfinished line)" if state.pending_bytes else "(an empty file)"
        raise InvalidRequest(f"{self.path}: no trajectories {detail}", code="no_trajectories")

    def problems(self, limit: int = 50) -> list[Problem]:
        with self._lock:
            rows = self._db.execute(
                "SELECT line, offset, code, message FROM problems ORDER BY line LIMIT ?", (limit,)
            ).fetchall()
        return [Problem(*row) for row in rows]

    def count(self, where: EpisodeFilter | None = None) -> int:
        clause, params = (where or EpisodeFilter()).sql()
        with self._lock:
            row = self._db.execute(
                f"SELECT count(*) FROM episodes WHERE superseded=0{clause}", params
            ).fetchone()
        return int(row[0])

    def page(
        self,
        where: EpisodeFilter | None = None,
        order: EpisodeOrder = "line",
        offset: int = 0,
        limit: int = 50,
    ) -> list[EpisodeRow]:
        clause, params = (where or EpisodeFilter()).sql()
        order_by = _ORDER_BY[order]
        with self._lock:
            rows = self._db.execute(
                "SELECT id, line, task_id, sample_index, reward, masked, stop_reason, error_kind,"
                " tools_used, turns, tool_calls, tool_errors,"
                " prompt_tokens + completion_tokens, total_s, policy_version"
                f" FROM episodes WHERE superseded=0{clause} ORDER BY {order_by} LIMIT ? OFFSET ?",
                [*params, limit, offset],
            ).fetchall()
        return [_row(r) for r in rows]

    def place(
        self, episode_id: int, where: EpisodeFilter | None = None, order: EpisodeOrder = "line"
    ) -> ListPlace | None:
        """Where ``episode_id`` stands in the list :meth:`page` gives for ``where`` and
        ``order`` (the episode page's previous and next); None when it is not in it. The
        list's ids are read once and kept until the index changes, so walking a list of
        100,000 episodes with "next" sorts it once, not on every page."""
        where = where or EpisodeFilter()
        version = self.state().version
        with self._lock:
            ids = self._lists.get((version, where, order))
        if ids is None:
            clause, params = where.sql()
            with self._lock:
                rows = self._db.execute(
                    f"SELECT id FROM episodes WHERE superseded=0{clause}"
                    f" ORDER BY {_ORDER_BY[order]}",
                    params,
                ).fetchall()
            ids = array("q", (row[0] for row in rows))
            with self._lock:
                self._lists.put((version, where, order), ids, ids.itemsize * len(ids))
        try:
            i = ids.index(episode_id)
        except ValueError:
            return None
        return ListPlace(
            position=i + 1,
            total=len(ids),
            previous=ids[i - 1] if i else None,
            next=ids[i + 1] if i + 1 < len(ids) else None,
        )

    def episode(self, episode_id: int) -> EpisodeRow | None:
        with self._lock:
            row = self._db.execute(
                "SELECT id, line, task_id, sample_index, reward, masked, stop_reason, error_kind,"
                " tools_used, turns, tool_calls, tool_errors,"
                " prompt_tokens + completion_tokens, total_s, policy_version"
                " FROM episodes WHERE id=?",
                (episode_id,),
            ).fetchone()
        return None if row is None else _row(row)

    def record(self, episode_id: int) -> dict[str, Any]:
        """The record of one episode, read from its offset in the file (one that
        :func:`~envhub.view.record.check_record` passes, as when it was indexed), whole:
        a tree child's shared prefix is restored from its ancestors' records."""
        record = self._raw_record(episode_id)
        chain = [record]
        while chain[-1].get("schema_version") == 2 and len(chain) <= _MAX_TREE_DEPTH:
            parent = self.by_trajectory(str(chain[-1].get("parent_id")))
            if parent is None:
                raise InvalidRequest(
                    f"{self.path}: episode {episode_id}'s tree lacks its parent "
                    f"{chain[-1].get('parent_id')!r}", code="file_changed",
                )  # fmt: skip
            chain.append(self._raw_record(parent))
        whole = chain.pop()
        while chain:
            whole = restore_prefix(chain.pop(), whole)
        return whole

    def by_trajectory(self, trajectory_id: str) -> int | None:
        """The current episode of a trajectory id (the latest, if it is there twice)."""
        with self._lock:
            row = self._db.execute(
                "SELECT id FROM episodes WHERE trajectory_id=? ORDER BY superseded, id DESC",
                (trajectory_id,),
            ).fetchone()
        return None if row is None else int(row[0])

    def tree(self, tree_id: str) -> list[TreeNode]:
        """The indexed episodes of one tree, by sample index (the root first)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, trajectory_id, parent_id, branch_turn, sample_index, reward,"
                " masked, turns FROM episodes WHERE tree_id=? ORDER BY sample_index, id",
                (tree_id,),
            ).fetchall()
        return [TreeNode(r[0], r[1], r[2], r[3], r[4], r[5], bool(r[6]), r[7] or 0) for r in rows]

    def tree_of(self, episode_id: int) -> tuple[str, str | None, str | None, int | None] | None:
        """(tree_id, trajectory_id, parent_id, branch_turn) of an episode of a tree."""
        with self._lock:
            row = self._db.execute(
                "SELECT tree_id, trajectory_id, parent_id, branch_turn FROM episodes"
                " WHERE id=? AND tree_id IS NOT NULL",
                (episode_id,),
            ).fetchone()
        return None if row is None else (row[0], row[1], row[2], row[3])

    def _raw_record(self, episode_id: int) -> dict[str, Any]:
        with self._lock:
            row = self._db.execute(
                "SELECT offset, length FROM episodes WHERE id=?", (episode_id,)
            ).fetchone()
        if row is None:
            raise InvalidRequest(f"no episode {episode_id} in {self.path}", code="unknown_episode")
        with open(self.path, "rb") as fh:
            fh.seek(row[0])
            raw = fh.read(row[1])
        record, problem = _parse(raw)
        try:
            if record is None:
                raise BadRecord(*problem)
            check_record(record)
        except BadRecord as exc:
            raise InvalidRequest(
                f"{self.path} changed under the viewer: {exc}", code="file_changed"
            ) from None
        return record

    def column(self, *names: str) -> list[Any]:
        """One value per current episode (for charts): the column, or the sum of the
        columns, read in one query (so a file being indexed meanwhile cannot skew it)."""
        unknown = [n for n in names if n not in _COLUMNS]
        if unknown or not names:
            raise ValueError(f"unknown columns {unknown!r}")
        with self._lock:
            rows = self._db.execute(
                f"SELECT {' + '.join(f'coalesce({n}, 0)' if len(names) > 1 else n for n in names)}"
                " FROM episodes WHERE superseded=0 ORDER BY line"
            ).fetchall()
        return [r[0] for r in rows]

    def request_latencies(self) -> list[float]:
        """Every model request's latency (``turns[].latency_s``) of the current episodes:
        the per-request distribution, which per-episode LLM time blurs by turn count."""
        with self._lock:
            rows = self._db.execute(
                "SELECT llm_latencies FROM episodes"
                " WHERE superseded=0 AND llm_latencies IS NOT NULL ORDER BY line"
            ).fetchall()
        return [latency for (encoded,) in rows for latency in orjson.loads(encoded)]

    def grouped(self, key: str, value: str = "count(*)") -> list[tuple[Any, ...]]:
        """``SELECT key, value ... GROUP BY key`` over current episodes (for charts)."""
        if key not in _COLUMNS:
            raise ValueError(f"unknown column {key!r}")
        with self._lock:
            return self._db.execute(
                f"SELECT {key}, {value} FROM episodes WHERE superseded=0 GROUP BY {key} "
                f"ORDER BY {key}"
            ).fetchall()

    def reward_by_position(self, buckets: int = 10) -> list[tuple[int, float | None]]:
        """Mean reward of each ``1/buckets`` of the file in line order (episodes are
        written as they finish, so this is reward over the run's time)."""
        with self._lock:
            return self._db.execute(
                "SELECT (line - 1) * ? / (SELECT max(line) FROM episodes), avg(reward)"
                " FROM episodes WHERE superseded=0 GROUP BY 1 ORDER BY 1",
                (buckets,),
            ).fetchall()

    def by_task(self, success_threshold: float) -> list[tuple[str, int, int, float | None, float]]:
        """(task_id, episodes, scored, mean reward, success rate) per task."""
        with self._lock:
            return self._db.execute(
                "SELECT task_id, count(*), sum(1 - masked), avg(reward),"
                " coalesce(avg(CASE WHEN masked THEN NULL ELSE reward >= ? END), 0)"
                " FROM episodes WHERE superseded=0 GROUP BY task_id ORDER BY task_id",
                (success_threshold,),
            ).fetchall()

    def distinct(self, column: str) -> list[str]:
        """Values seen in a column; for the ``|a|b|`` list columns, the single names."""
        if column not in _COLUMNS:
            raise ValueError(f"unknown column {column!r}")
        with self._lock:
            rows = self._db.execute(
                f"SELECT DISTINCT {column} FROM episodes WHERE superseded=0"
            ).fetchall()
        values: set[str] = set()
        for (value,) in rows:
            if value is None:
                continue
            if isinstance(value, str) and value.startswith("|"):
                values.update(v for v in value.split("|") if v)
            else:
                values.add(str(value))
        return sorted(values)

    def summary_records(self) -> Iterator[dict[str, Any]]:
        """The records as :func:`envhub.rollout.summary.summarize` reads them, rebuilt from
        the index columns (so a summary needs no pass over the file)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT task_id, reward, masked, stop_reason, error_kind, turns, tool_errors,"
                " retried, prompt_tokens, completion_tokens, served_by"
                " FROM episodes WHERE superseded=0 ORDER BY line"
            ).fetchall()
        for r in rows:
            yield {
                "task_id": r[0],
                "reward": r[1],
                "masked": bool(r[2]),
                "stop_reason": r[3],
                "error": {"kind": r[4]} if r[4] else None,
                "metrics": {
                    "turns": r[5] or 0,
                    "tool_errors": r[6] or 0,
                    "retried_errors": orjson.loads(r[7]) if r[7] else {},
                },
                "usage": {"prompt_tokens": r[8] or 0, "completion_tokens": r[9] or 0},
                "served_by": r[10],
            }

    def first_values(self) -> dict[str, Any]:
        """env, version and model of the first episode (what a runs row names)."""
        with self._lock:
            row = self._db.execute(
                "SELECT env_name, env_version, model FROM episodes WHERE superseded=0 "
                "ORDER BY line LIMIT 1"
            ).fetchone()
        return dict(zip(("env", "env_version", "model"), row or (None, None, None), strict=True))

    def find(self, task_id: str) -> list[EpisodeRow]:
        """The current episodes of one task, by sample index."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, line, task_id, sample_index, reward, masked, stop_reason, error_kind,"
                " tools_used, turns, tool_calls, tool_errors,"
                " prompt_tokens + completion_tokens, total_s, policy_version"
                " FROM episodes WHERE superseded=0 AND task_id=? ORDER BY sample_index",
                (task_id,),
            ).fetchall()
        return [_row(r) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()


_ORDER_BY: Final[dict[EpisodeOrder, str]] = {
    "line": "line",
    "reward": "masked, reward, line",
    "-reward": "masked, reward DESC, line",
    "turns": "turns, line",
    "-turns": "turns DESC, line",
    "task": "task_id, sample_index, line",
    "-time": "total_s DESC, line",
}  # every order ends in a unique key, so a page and an episode's neighbours agree


def _row(r: tuple[Any, ...]) -> EpisodeRow:
    return EpisodeRow(
        id=r[0], line=r[1], task_id=r[2], sample_index=r[3], reward=r[4], masked=bool(r[5]),
        stop_reason=r[6], error_kind=r[7], tools_used=[t for t in r[8].split("|") if t],
        turns=r[9] or 0, tool_calls=r[10] or 0, tool_errors=r[11] or 0, tokens=r[12] or 0,
        total_s=r[13] or 0.0, policy_version=r[14],
    )  # fmt: skip


def _parse(raw: bytes) -> tuple[dict[str, Any] | None, tuple[str, str]]:
    """The record on a line, or None and (code, message) saying why there is none."""
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as bad:
            return None, ("not_utf8", f"not valid UTF-8 (byte {bad.start} of the line)")
        return None, ("not_json", f"not a JSON record: {exc}")
    if not isinstance(record, dict):
        return None, ("not_json", f"a JSON {type(record).__name__}, not a record")
    return record, ("", "")


def _columns(viewed: ViewedRecord, offset: int, length: int, line: int) -> tuple[Any, ...]:
    """The index row of a checked record."""
    metrics, usage, timings, turns = viewed.metrics, viewed.usage, viewed.timings, viewed.turns
    versions = [t.policy_version for t in turns if t.policy_version is not None]
    latencies = [t.latency_s for t in turns]
    kinds = set(metrics.errors_by_kind) | ({viewed.error.kind} if viewed.error else set())
    tools = {c.called.name or "" for m in viewed.messages for c in m.tool_calls or []}
    return (
        offset, length, line, viewed.task_id, viewed.sample_index, viewed.trajectory_id,
        viewed.reward, int(viewed.masked), viewed.stop_reason,
        viewed.error.kind if viewed.error else None, _bars(kinds), _bars(tools),
        metrics.turns, metrics.tool_calls, metrics.tool_errors, usage.prompt_tokens,
        usage.completion_tokens, timings.llm_s, timings.env_s, timings.total_s,
        max(versions) if versions else None, viewed.served_by,
        int(any(t.completion_token_ids for t in turns)), viewed.model,
        viewed.env.name if viewed.env else None, viewed.env.version if viewed.env else None,
        orjson.dumps(metrics.retried_errors).decode() if metrics.retried_errors else None,
        orjson.dumps(latencies).decode() if latencies else None,
        _distribution(viewed.env), viewed.env.task_set_hash if viewed.env else None,
        viewed.tree_id, viewed.parent_id, viewed.branch_turn,
    )  # fmt: skip


def _distribution(env: EnvRef | None) -> str | None:
    """``"envhub-rl-calc 0.2.0"``: the distribution pin of a record, where it has one."""
    if env is None or env.distribution is None:
        return None
    return f"{env.distribution} {env.distribution_version or '?'}"


def _bars(names: set[str]) -> str:
    """``{"a", "b"}`` -> ``"|a|b|"``: a list a LIKE '%|a|%' filter can match (a ``|`` in
    a name becomes ``/``; empty names are left out)."""
    listed = sorted({n.replace("|", "/") for n in names if n})
    return "|" + "|".join(listed) + "|" if listed else ""
