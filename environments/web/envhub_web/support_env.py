"""The ``support`` environment: a customer-support conversation on the MiniShop catalog.

A simulated customer (:class:`envhub.users.LLMUser`) wants one product and tells its
requirements only when asked; the agent talks to it with plain messages and works the
catalog with tools (``search_catalog``, ``inspect_product``) and the store's order book
(``place_order``, ``cancel_order``). Like tau-bench, the reward is the final state of the
order book, not a judge's opinion of the conversation: 1 when exactly one order stands
and it is a product that meets every requirement with the options the customer wanted,
else 0. No site and no browser: the catalog is searched in memory.

The customer is played by the operator's ``user`` option (a
:class:`~envhub.users.UserEndpoint`; default ``scripted``, the deterministic
:class:`~envhub.users.ScriptedUserModel`), never chosen by a server's client. Its
requirements live in the task's metadata, which the agent's side never receives: the
agent learns them from the customer's replies only, and nothing the agent writes reaches
the order book but its tool calls.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any, ClassVar

from pydantic import Field

from envhub import Budgets, Environment, Reward, Task, TaskSet, UserTurn, tool
from envhub.types import Message
from envhub.users import LLMUser, UserEndpoint, UserModel, UserProfile
from envhub_web.catalog import Catalog, Product, load_catalog
from envhub_web.shop_tasks import goal_of, shop_split_counts
from envhub_web.support_tasks import generate_support_tasks

__all__ = ["SupportEnv"]


@dataclass(frozen=True)
class _Order:
    order_id: int
    asin: str
    options: dict[str, str]
    price: float
    cancelled: bool = False


@lru_cache(maxsize=4)
def _taskset(seed: int, size: int, count: int) -> TaskSet:
    return TaskSet(generate_support_tasks(load_catalog(seed, size), count, seed))


def _describe(product: Product) -> str:
    options = "\n".join(f"  {name}: {', '.join(vs)}" for name, vs in product.options.items())
    return (
        f"{product.asin}: {product.title}\ncategory: {product.category}\n"
        f"type: {product.product_type}\nfeatures: {', '.join(product.attributes)}\n"
        f"price: {product.price:.2f}\nrating: {product.rating}\noptions:\n{options}"
    )


class SupportEnv(Environment):
    """Help a simulated customer buy the product they want; scored by the order book.

    Options: ``user`` (who plays the customer: a :class:`~envhub.users.UserEndpoint`, its
    JSON or a kind such as ``"scripted"``; in Python also a ready
    :class:`~envhub.users.UserModel`, shared by the episodes and closed by its owner),
    ``user_writes_opening`` (the customer's model writes its first message, as
    tau-bench's user does, instead of the task's fixed one), ``catalog_seed``/
    ``catalog_size`` (MiniShop's seeded catalog), ``num_tasks``.
    """

    name = "support"
    version = "0.1.0"
    budgets = Budgets(max_turns=20)
    final_answer_ends_episode = True  # reopened by the customer's reply (next_user_turn)
    # the customer's model and the catalog are the operator's: a client picks a task count
    client_options: ClassVar[dict[str, Any]] = {"num_tasks": Annotated[int, Field(ge=1, le=5000)]}

    def __init__(
        self,
        user: UserEndpoint | Mapping[str, Any] | str | UserModel = "scripted",
        user_writes_opening: bool = False,
        catalog_seed: int = 0,
        catalog_size: int = 3000,
        num_tasks: int = 500,
    ) -> None:
        if isinstance(user, UserModel):
            self._shared_user: UserModel | None = user
        else:  # an unknown kind or a malformed endpoint is refused here, before any episode
            self._shared_user = None
            self._open_model = UserEndpoint.parse(user).opener()
        self.user_writes_opening = bool(user_writes_opening)
        self.catalog_seed, self.catalog_size = int(catalog_seed), int(catalog_size)
        self.num_tasks = int(num_tasks)
        self.user: LLMUser | None = None
        self.orders: list[_Order] = []

    def load_tasks(self) -> TaskSet:
        return _taskset(self.catalog_seed, self.catalog_size, self.num_tasks)

    def task_counts(self) -> Mapping[str, int]:
        return shop_split_counts(self.num_tasks)

    @property
    def catalog(self) -> Catalog:
        return load_catalog(self.catalog_seed, self.catalog_size)

    def _open_user(self, task: Task) -> LLMUser:
        """This episode's customer: on the shared model, else on one opened for it."""
        if self._shared_user is not None:
            model, owned = self._shared_user, False
        else:
            model, owned = self._open_model(), True
        profile = UserProfile.of_task(task)
        if self.user_writes_opening:
            profile = profile.model_copy(update={"opening": None})
        return LLMUser(profile, model, task_id=task.id, owns_model=owned)

    async def reset(self, task: Task) -> list[Message]:
        messages = await super().reset(task)
        self.user = self._open_user(task)
        messages.append({"role": "user", "content": await self.user.opening()})
        return messages

    async def next_user_turn(self) -> UserTurn | None:
        """The customer's answer to the agent's message; the episode ends
        (``env:user_done`` or ``env:user_turn_budget``) when the customer is through."""
        assert self.user is not None
        text = await self.user.reply(self.final_answer or "")
        if text is None:
            self.end_episode(self.user.stop_reason or "user_done")
            return None
        return UserTurn([text])

    @tool
    def search_catalog(self, query: str) -> str:
        """Search the store's catalog; returns the 10 best matches, one per line.

        Args:
            query: words describing the product (type, features)
        """
        found, total = self.catalog.page(query[:500], 1)
        if not found:
            return "no products match"
        lines = [f"{p.asin} | {p.title} | {p.price:.2f}" for p in found]
        return f"{total} products match; the best {len(found)}:\n" + "\n".join(lines)

    @tool
    def inspect_product(self, asin: str) -> str:
        """A product's details: features, price and the values of each option.

        Args:
            asin: the product's id, as search_catalog lists it
        """
        return _describe(self._product(asin))

    @tool
    def place_order(self, asin: str, options: dict[str, str]) -> str:
        """Order one product for the customer with one value for each of its options.

        Args:
            asin: the product's id
            options: option name -> chosen value, e.g. {"size": "large", "color": "navy"}
        """
        product = self._product(asin)
        if set(options) != set(product.options):
            raise ValueError(f"choose exactly the options {', '.join(product.options) or 'none'}")
        for name, value in options.items():
            if value not in product.options[name]:
                raise ValueError(f"{name} must be one of {', '.join(product.options[name])}")
        order = _Order(len(self.orders) + 1, product.asin, dict(options), product.price)
        self.orders.append(order)
        return f"order {order.order_id} placed: {product.title}, {options}, {product.price:.2f}"

    @tool
    def cancel_order(self, order_id: int) -> str:
        """Cancel an order placed in this conversation.

        Args:
            order_id: the number place_order returned
        """
        index = order_id - 1
        if not 0 <= index < len(self.orders) or self.orders[index].cancelled:
            raise ValueError(f"no open order {order_id}")
        order = self.orders[index]
        self.orders[index] = _Order(order.order_id, order.asin, order.options, order.price, True)
        return f"order {order_id} cancelled"

    def _product(self, asin: str) -> Product:
        product = self.catalog.by_asin.get(asin.strip().upper())
        if product is None:
            raise ValueError(f"no product {asin[:40]!r}")
        return product

    def reward(self) -> Reward:
        """1 when the one standing order is a product of the wanted type, with every
        wanted feature, within budget and with the wanted options; else 0."""
        goal = goal_of(self.task)
        standing = [o for o in self.orders if not o.cancelled]
        product = self.catalog.by_asin[standing[0].asin] if len(standing) == 1 else None
        right_product = product is not None and (
            product.product_type == goal["name"]
            and set(goal["attributes"]).issubset(product.attributes)  # type: ignore[call-overload]
            and product.price <= float(goal["price_upper"])  # type: ignore[arg-type]
        )
        right_options = len(standing) == 1 and standing[0].options == goal["options"]
        components = {
            "ordered": float(bool(standing)),
            "single_order": float(len(standing) == 1),
            "right_product": float(right_product),
            "right_options": float(right_options),
        }
        info: dict[str, Any] = {"orders": [vars(o) for o in self.orders]}
        if self.user is not None:
            info.update(self.user.info())
        return Reward(value=float(right_product and right_options), components=components,
                      info=info)  # fmt: skip

    async def snapshot(self) -> dict[str, Any] | None:
        """The order book and the customer's side of the conversation, copied."""
        state = self.copied_state("orders")
        state["user"] = self.user.state() if self.user is not None else None
        return state

    async def restore(self, state: object) -> None:
        assert isinstance(state, dict)
        self.restore_copied(state)
        if state["user"] is not None:
            self.user = self._open_user(self.task)
            self.user.restore(copy.deepcopy(state["user"]))

    async def close(self) -> None:
        if self.user is not None:
            await self.user.aclose()
