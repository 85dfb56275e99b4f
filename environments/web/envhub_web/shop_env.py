"""The ``web`` environment: WebShop-style shopping on the local MiniShop site."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Annotated, Any, ClassVar

from pydantic import Field

from envhub import Reward, Task, TaskSet
from envhub.rewards.web import ShopGoal, ShopPurchase, webshop_reward
from envhub.types import Message
from envhub_web.catalog import Product, load_catalog
from envhub_web.server import Site, get_site
from envhub_web.shop_tasks import generate_shop_tasks, goal_of, shop_split_counts
from envhub_web.state import COOKIE, CartLine
from envhub_web.tab import NAV_TIMEOUT_S
from envhub_web.text_tab import TextTab
from envhub_web.tools import BrowsingEnv

__all__ = ["WebShopEnv"]


def _purchase(product: Product, line: CartLine) -> ShopPurchase:
    return ShopPurchase(
        title=product.title,
        category=product.category,
        attributes=product.attributes,
        options=line.options,
        price=line.price,
        features=product.features,
        description=product.description,
        query=product.product_type,
    )


@lru_cache(maxsize=4)
def _taskset(seed: int, size: int, count: int) -> TaskSet:
    """Tasks depend on the catalog only, not on mode or timeouts: build them once."""
    return TaskSet(generate_shop_tasks(load_catalog(seed, size), count, seed))


class WebShopEnv(BrowsingEnv):
    """Find and buy the product an instruction describes; scored by WebShop's reward.

    Options: ``mode`` ("browser" or "text"; default browser when Chromium is found),
    ``catalog_seed``/``catalog_size`` (the seeded product catalog), ``num_tasks``,
    ``nav_timeout_s``, ``chromium_path``, ``screenshot_dir`` (a PNG per step, browser
    mode), ``fresh_browser`` (a Chromium per episode instead of the shared pool).
    """

    name = "web"
    version = "0.1.0"
    # the mode, catalog (a site per catalog), browser and paths are the operator's
    client_options: ClassVar[dict[str, Any]] = {"num_tasks": Annotated[int, Field(ge=1, le=10_000)]}

    def __init__(
        self,
        mode: str | None = None,
        catalog_seed: int = 0,
        catalog_size: int = 3000,
        num_tasks: int = 2500,
        nav_timeout_s: float = NAV_TIMEOUT_S,
        chromium_path: str | None = None,
        screenshot_dir: str | None = None,
        fresh_browser: bool = False,
    ) -> None:
        super().__init__(
            mode=mode,
            nav_timeout_s=nav_timeout_s,
            chromium_path=chromium_path,
            screenshot_dir=screenshot_dir,
            fresh_browser=fresh_browser,
        )
        self.catalog_seed, self.catalog_size = int(catalog_seed), int(catalog_size)
        self.num_tasks = int(num_tasks)
        self.site: Site | None = None
        self.token = ""

    def load_tasks(self) -> TaskSet:
        return _taskset(self.catalog_seed, self.catalog_size, self.num_tasks)

    def task_counts(self) -> Mapping[str, int]:
        return shop_split_counts(self.num_tasks)

    async def reset(self, task: Task) -> list[Message]:
        messages = await super().reset(task)
        self.site = await get_site(self.catalog_seed, self.catalog_size)
        self.token = self.site.store.new_token()
        self.tab = await self.open_tab({COOKIE: self.token}, self.site.base_url)
        await self.tab.goto(self.site.base_url + "/")
        page = await self.observe()
        messages[-1]["content"] = f"{messages[-1]['content']}\n\nCurrent page:\n{page}"
        return messages

    async def snapshot(self) -> dict[str, Any] | None:
        """Text mode: the page as the tab holds it (filled fields included), its history,
        and the session's cart and orders, copied; each child gets a token of its own
        with that cart and orders, and a tab of its own on that page, so no request is
        made (a replay would reload every page, and order numbers, counted per site,
        would come out different). Browser mode: ``None``, a fork by replay (a
        browser page's state cannot be copied)."""
        if self.mode != "text" or self.site is None:
            return None
        assert isinstance(self.tab, TextTab)
        state = self.copied_state("answer", "_steps", shared=("site",))
        state["shop"] = self.site.store.copy_state(self.token)
        state["view"] = self.tab.view()
        return state

    async def restore(self, state: object) -> None:
        assert isinstance(state, dict)
        self.restore_copied(state)
        assert self.site is not None
        self.token = self.site.store.new_token()
        self.site.store.adopt(self.token, state["shop"])
        tab = await self.open_tab({COOKIE: self.token}, self.site.base_url)
        assert isinstance(tab, TextTab)
        tab.show(state["view"])
        self.tab = tab

    def reward(self) -> Reward:
        goal_data = goal_of(self.task)
        goal = ShopGoal(
            name=str(goal_data["name"]),
            category=str(goal_data["category"]),
            attributes=list(goal_data["attributes"]),
            options=dict(goal_data["options"]),
            price_upper=float(goal_data["price_upper"]),
            query=str(goal_data["name"]),
        )
        orders = self.site.store.orders(self.token) if self.site else []
        if not orders:
            return Reward(
                value=0.0,
                components=webshop_reward(goal, None).components,
                info={"orders": 0, "answer": self.answer},
            )
        lines = orders[-1].lines
        catalog = self.site.catalog  # type: ignore[union-attr]
        scores = [webshop_reward(goal, _purchase(catalog.by_asin[x.asin], x)) for x in lines]
        value = sum(s.value for s in scores) / len(scores)
        components = {
            k: sum(s.components[k] for s in scores) / len(scores) for k in scores[0].components
        }
        components["success"] = float(value >= 1.0 - 1e-9)
        return Reward(
            value=value,
            components=components,
            info={
                "orders": len(orders),
                "bought": [x.asin for x in lines],
                "answer": self.answer,
            },
        )

    async def close(self) -> None:
        await super().close()
        if self.site is not None:
            self.site.store.drop(self.token)
