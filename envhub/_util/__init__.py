"""Small private utilities with no envhub dependencies: the one backoff formula,
memory-bounded LRU caches and garbage-collector settings. Not part of the public API.
"""
