"""Latency of the ``search`` environment's passage search (SQLite FTS5 BM25).

Measures, in one run:

* the shipped corpus: build time, index size, peak memory, and ``search`` latency p50/p99
  over the tasks' gold queries and natural-language questions;
* baselines on the same queries: a naive scan over all passages (no index), and the
  ``retriever=bm25s`` option when its extra is installed;
* a synthetic corpus of ``--synthetic`` passages (default 1,000,000; ~100 words each from
  a 50,000-word Zipf vocabulary): build time, index size, memory and latency of keyword
  queries.

Ratios against the baselines are printed at the end. Run from the repository root:

    python benchmarks/search_latency.py                 # full run (1M passages: minutes)
    python benchmarks/search_latency.py --synthetic 100000 --queries 500
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import sqlite3
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from envhub_search.articles import Passage
from envhub_search.corpus import CorpusOptions, load_corpus
from envhub_search.index import SearchIndex, build_index, fts_query

from envhub.errors import InvalidRequest

_WORD = re.compile(r"\w+")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def percentiles(samples_s: list[float]) -> tuple[float, float]:
    """(p50, p99) in milliseconds."""
    ordered = sorted(samples_s)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1e3, p99 * 1e3


@dataclass
class Timings:
    """Per-query seconds. On a shared machine wall-clock time includes waiting for a core;
    CPU time does not, so both are reported."""

    wall: list[float]
    cpu: list[float]


def measure(search: Callable[[str], object], queries: list[str], warmup: int = 20) -> Timings:
    for query in queries[:warmup]:
        search(query)
    timings = Timings([], [])
    for query in queries:
        start, start_cpu = time.perf_counter(), time.thread_time()
        search(query)
        timings.wall.append(time.perf_counter() - start)
        timings.cpu.append(time.thread_time() - start_cpu)
    return timings


def describe(label: str, timings: Timings, note: str = "") -> tuple[float, float]:
    """Print wall-clock and CPU p50/p99; returns the (wall, cpu) p50 in ms."""
    p50, p99 = percentiles(timings.wall)
    c50, c99 = percentiles(timings.cpu)
    print(f"  {label:<18} p50 {p50:7.3f} ms  p99 {p99:7.3f} ms   "
          f"(cpu p50 {c50:.3f} ms, p99 {c99:.3f} ms){note}")
    return p50, c50


class NaiveScan:
    """The no-index baseline: score every passage by query-term counts on each query."""

    def __init__(self, passages: list[tuple[str, str]]) -> None:
        self.passages = [(pid, Counter(_WORD.findall(text.lower()))) for pid, text in passages]

    def search(self, query: str, k: int = 5) -> list[str]:
        expression = fts_query(query) or ""
        terms = [t.strip('"') for t in expression.split(" OR ") if t]
        scored = [(sum(counts[t] for t in terms), pid) for pid, counts in self.passages]
        return [pid for score, pid in sorted(scored, reverse=True)[:k] if score]


def synthetic_passages(count: int, seed: int = 0) -> Iterator[Passage]:
    """``count`` ~100-word passages over a 50,000-word Zipf vocabulary, one per document."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(50_000)]
    weights = [1 / (rank + 1) ** 1.07 for rank in range(len(vocab))]
    cumulative = list(_accumulate(weights))
    for n in range(count):
        words = rng.choices(vocab, cum_weights=cumulative, k=rng.randint(80, 120))
        yield Passage(f"syn/{n}#0", f"syn/{n}", f"Document {n} {words[0]}", " ".join(words))


def _accumulate(values: list[float]) -> Iterator[float]:
    total = 0.0
    for value in values:
        total += value
        yield total


def synthetic_queries(count: int, seed: int = 1) -> list[str]:
    """2-4 keyword queries; words log-uniform over vocabulary ranks 100-50,000.

    Keywords are content words: the top 100 ranks play the part of function words
    (each is in most passages), which real queries lose to the stop-word filter.
    """
    rng = random.Random(seed)
    return [" ".join(f"w{int(100 * 500 ** rng.random())}" for _ in range(rng.randint(2, 4)))
            for _ in range(count)]


@dataclass
class Build:
    """What building an index cost."""

    wall_s: float
    cpu_s: float
    index_mb: float
    peak_rss_mb: float  # the process's peak resident memory once the build is done

    def describe(self) -> str:
        return (f"build {self.wall_s:.2f} s (cpu {self.cpu_s:.2f} s), index "
                f"{self.index_mb:.1f} MiB, process peak RSS {self.peak_rss_mb:.0f} MiB")


def timed_build(build: Callable[[], str]) -> Build:
    """Run ``build`` (which returns the index path) and measure it."""
    start, start_cpu = time.perf_counter(), time.process_time()
    path = build()
    return Build(time.perf_counter() - start, time.process_time() - start_cpu,
                 os.path.getsize(path) / 2**20, peak_rss_mb())


def bench_shipped(workdir: Path, n_queries: int) -> dict[str, tuple[float, float]]:
    """Measure the shipped corpus and its baselines; returns each one's (wall, cpu) p50."""
    options = CorpusOptions()
    build = timed_build(lambda: load_corpus(options, cache_dir=workdir).index.path)
    corpus = load_corpus(options, cache_dir=workdir)
    docs, n_passages = corpus.index.counts()
    tasks = list(corpus.tasks)
    queries = [c.arguments["query"] for t in tasks for c in t.gold_actions if c.name == "search"]
    queries += [t.prompt[-1]["content"] for t in tasks]  # the questions, as a model might
    random.Random(0).shuffle(queries)
    queries = queries[:n_queries]
    print(f"shipped corpus: {docs} documents, {n_passages} passages; {build.describe()}; "
          f"{len(queries)} queries, k=5")
    p50 = {"FTS5": describe("FTS5 bm25 search",
                            measure(lambda q: corpus.index.search(q, 5), queries))}

    con = sqlite3.connect(f"file:{corpus.index.path}?mode=ro", uri=True)
    passages = [(pid, f"{title} {body}") for pid, title, body in
                con.execute("SELECT pid, title, body FROM passages")]
    con.close()
    naive_queries = queries[: max(50, n_queries // 10)]
    p50["naive scan"] = describe(
        "naive scan", measure(NaiveScan(passages).search, naive_queries, warmup=5),
        f" [{len(naive_queries)} queries]")
    try:
        bm25s = corpus.retriever("bm25s")  # the environment's retriever=bm25s option
    except InvalidRequest as missing:
        print(f"bm25s skipped: {missing}")
    else:
        p50["bm25s"] = describe("bm25s retriever",
                                measure(lambda q: bm25s.search(q, 5), queries, warmup=5))
    return p50


def bench_synthetic(workdir: Path, count: int, n_queries: int) -> tuple[float, float]:
    """Build and measure the synthetic corpus; returns the FTS5 (wall, cpu) p50 in ms."""
    path = workdir / "synthetic.sqlite"

    def build() -> str:
        # documents get no text: ``open`` is not measured and the copy would double the size
        build_index(path, ((f"syn/{n}", f"Document {n}", "", 1) for n in range(count)),
                    synthetic_passages(count))
        return str(path)

    cost = timed_build(build)
    print(f"synthetic corpus: {count:,} passages; {cost.describe()} "
          f"({count / cost.wall_s:,.0f} passages/s); {n_queries} queries, k=5")
    index = SearchIndex(path)
    return describe("FTS5 bm25 search", measure(lambda q: index.search(q, 5),
                                                synthetic_queries(n_queries)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=2000, help="queries per measurement")
    parser.add_argument("--synthetic", type=int, default=1_000_000,
                        help="passages in the synthetic corpus (0: skip it)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="envhub-search-bench-") as tmp:
        p50 = bench_shipped(Path(tmp), args.queries)
        if args.synthetic:
            p50[f"synthetic {args.synthetic:,}"] = bench_synthetic(
                Path(tmp), args.synthetic, min(args.queries, 1000))
    (fts_wall, fts_cpu) = p50.pop("FTS5")
    print("ratios of p50 against FTS5 on the shipped corpus (wall-clock; cpu):")
    for name, (wall, cpu) in p50.items():
        print(f"  {name:<18} {wall / fts_wall:7.2f}x  {cpu / fts_cpu:7.2f}x")
    print(f"target p50 < 5 ms on the shipped corpus: {'met' if fts_wall < 5 else 'NOT met'}")


if __name__ == "__main__":
    main()
