"""The ``search`` environment: search a local corpus, read articles, answer.

Reward is exact match of the answer against the gold aliases after SQuAD normalisation;
token F1, substring match (Search-R1's ``subem``) and whether the episode's searches or
opened articles contained a gold supporting passage are recorded with weight 0.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from envhub import Budgets, Environment, Reward, TaskSet, tool
from envhub.errors import InvalidRequest
from envhub.rewards import Rubric, exact_match, f1, substring_match
from envhub_search.corpus import RETRIEVERS, CorpusOptions, Retriever, load_corpus
from envhub_search.index import Hit, SearchIndex, fts_query

__all__ = ["SearchEnv"]

MAX_K = 20
_PASSAGE_SUFFIX = re.compile(r"#\d+$")  # passage ids are "<doc_id>#<n>"


def _render_hits(query: str, hits: list[Hit]) -> str:
    if not hits:
        if fts_query(query) is None:
            return "No results: the query has no words to search for. Use a few keywords."
        return f"No results for {query[:200]!r}. Try other or fewer keywords."
    return "\n\n".join(
        f"[{rank}] id={hit.pid} title={hit.title!r}\n{hit.text}" for rank, hit in enumerate(hits, 1)
    )


class SearchEnv(Environment):
    """Retrieval QA over an offline encyclopedia (or a user corpus) with BM25 search."""

    name = "search"
    version = "0.1.0"
    budgets = Budgets(max_turns=16, tool_timeout_s=10.0, episode_timeout_s=600.0)
    rubric = Rubric({"exact_match": 1.0, "f1": 0.0, "substring_match": 0.0})
    # two values each, so at most a few corpora per server; a seed (a new corpus on the
    # server's disk and in its memory per value), paths and the cache are the operator's
    client_options: ClassVar[dict[str, Any]] = {
        "counterfactual": bool,
        "retriever": Literal[tuple(RETRIEVERS)],
    }

    def __init__(
        self,
        seed: int = 0,
        counterfactual: bool = False,
        corpus: str | None = None,
        tasks: str | None = None,
        cache_dir: str | None = None,
        retriever: str = "fts5",
    ) -> None:
        super().__init__()
        if retriever not in RETRIEVERS:
            raise InvalidRequest(
                f"retriever must be one of {', '.join(RETRIEVERS)}, not {retriever!r}"
            )
        self.retriever_name = retriever
        self.options = CorpusOptions(
            seed=_as_int(seed),
            counterfactual=_as_bool(counterfactual),
            corpus=None if corpus is None else str(corpus),
            tasks=None if tasks is None else str(tasks),
        )
        self.cache_dir = cache_dir
        self.submitted: str | None = None
        self.seen: set[str] = set()  # passage and document ids the agent was shown

    @property
    def index(self) -> SearchIndex:
        """The shared index of this option set (built or loaded on first use)."""
        return load_corpus(self.options, self.cache_dir).index

    @property
    def retriever(self) -> Retriever:
        """What ranks ``search`` results: FTS5's BM25 or bm25s (option ``retriever``)."""
        return load_corpus(self.options, self.cache_dir).retriever(self.retriever_name)

    def load_tasks(self) -> TaskSet:
        return load_corpus(self.options, self.cache_dir).tasks

    @tool
    def search(self, query: str, k: int = 5) -> str:
        """Search the encyclopedia and return the best-matching passages with their ids.

        Args:
            query: Keywords, e.g. "France capital" or "Iron discovered" (at most 1000
                characters).
            k: How many passages to return (1-20).
        """
        if not 1 <= k <= MAX_K:
            raise ValueError(f"k must be between 1 and {MAX_K}, not {k}")
        hits = self.retriever.search(query, k)
        for hit in hits:
            self.seen.update((hit.pid, hit.doc_id))
        return _render_hits(query, hits)

    @tool
    def open(self, doc_id: str) -> str:
        """Read a whole article.

        Args:
            doc_id: A document id from the search results, e.g. "country/FRA" (a passage id
                such as "country/FRA#2" opens its article).
        """
        doc_id = doc_id.strip()
        doc = None
        if _is_unicode(doc_id):  # no id is anything else, and sqlite cannot take it
            doc = self.index.document(doc_id) or self.index.document(
                _PASSAGE_SUFFIX.sub("", doc_id)
            )
        if doc is None:
            raise LookupError(f"no document {doc_id!r}; use an id from the search results")
        self.seen.update((doc.doc_id, *doc.passage_ids))
        return f"# {doc.title} (id={doc.doc_id})\n\n{doc.text}"

    @tool(terminal=True)
    def answer(self, text: str) -> str:
        """Submit the final answer; this ends the episode.

        Args:
            text: The answer only, as short as possible (a name or a number).
        """
        self.submitted = text
        return "answer recorded"

    async def snapshot(self) -> dict[str, Any]:
        """The passages seen and the answer, copied; the index is shared by every episode
        of these options (read-only), so a fork is O(1) in the episode's length."""
        return self.copied_state("submitted", "seen")

    async def restore(self, state: object) -> None:
        self.restore_copied(state)

    def reward(self) -> Reward:
        prediction = self.submitted if self.submitted is not None else (self.final_answer or "")
        golds = self.task.answer if isinstance(self.task.answer, list) else [str(self.task.answer)]
        components = {
            "exact_match": exact_match(prediction, golds),
            "f1": f1(prediction, golds),
            "substring_match": substring_match(prediction, golds),
        }
        gold_passages = self.task.metadata.get("gold_passages") or []
        if gold_passages:  # user tasks may come without supporting passages
            found = [p for p in gold_passages if p in self.seen]
            components["retrieved_gold"] = float(bool(found))
            components["gold_recall"] = len(found) / len(gold_passages)
        return self.rubric.score(components, prediction=prediction, answers=golds)


def _is_unicode(text: str) -> bool:
    """False for text with unpaired surrogates, which JSON tool arguments can carry."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _as_bool(value: object) -> bool:
    """Options arrive as strings from ``--env-arg counterfactual=true``."""
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off", ""):
            return False
        raise InvalidRequest(f"counterfactual must be true or false, not {value!r}")
    return bool(value)


def _as_int(value: object) -> int:
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise InvalidRequest(f"seed must be an integer, not {value!r}") from None
