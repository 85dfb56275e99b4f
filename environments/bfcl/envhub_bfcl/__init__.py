"""envhub-rl-bfcl: BFCL v4 categories as envhub task sets, scored by BFCL's own checkers."""

from envhub_bfcl.categories import CATEGORIES as CATEGORIES
from envhub_bfcl.env import BfclEnv as BfclEnv
from envhub_bfcl.export import bfcl_result as bfcl_result

__all__ = ["CATEGORIES", "BfclEnv", "bfcl_result"]
