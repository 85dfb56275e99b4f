"""envhub-rl-sql: interactive text-to-SQL over read-only SQLite databases."""

from envhub_sql.builder import build_database as build_database
from envhub_sql.connection import open_readonly as open_readonly
from envhub_sql.connection import run_query as run_query
from envhub_sql.env import SqlEnv as SqlEnv
from envhub_sql.guard import RejectedQuery as RejectedQuery
from envhub_sql.guard import check_query as check_query

__all__ = ["RejectedQuery", "SqlEnv", "build_database", "check_query", "open_readonly", "run_query"]
