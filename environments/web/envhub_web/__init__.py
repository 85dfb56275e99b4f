"""envhub-rl-web: WebShop-style shopping on a local site, and MiniWoB++, in text or browser mode."""

from envhub_web.catalog import Catalog as Catalog
from envhub_web.catalog import load_catalog as load_catalog
from envhub_web.miniwob_env import MiniWobEnv as MiniWobEnv
from envhub_web.runtime import shutdown as shutdown
from envhub_web.shop_env import WebShopEnv as WebShopEnv

__all__ = ["Catalog", "MiniWobEnv", "WebShopEnv", "load_catalog", "shutdown"]
