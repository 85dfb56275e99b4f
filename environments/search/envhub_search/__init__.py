"""envhub-rl-search: Search-R1-style retrieval QA over an offline encyclopedia corpus."""

from envhub_search.corpus import CorpusOptions as CorpusOptions
from envhub_search.corpus import load_corpus as load_corpus
from envhub_search.env import SearchEnv as SearchEnv
from envhub_search.index import SearchIndex as SearchIndex
from envhub_search.index import build_index as build_index

__all__ = ["CorpusOptions", "SearchEnv", "SearchIndex", "build_index", "load_corpus"]
