"""Per-session shop state (cart and orders), keyed by the session cookie's token.

The site server and the environments live in the same process, so an environment
reads its session's orders directly from here to compute the reward, and drops the
state when the episode closes. A lock makes it safe across the server thread and the
environments' event loops.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field

__all__ = ["COOKIE", "CartLine", "Order", "SessionStore", "ShopState"]

COOKIE = "minishop_session"


@dataclass(frozen=True)
class CartLine:
    asin: str
    options: dict[str, str]
    price: float


@dataclass(frozen=True)
class Order:
    order_id: int
    lines: tuple[CartLine, ...]


@dataclass
class ShopState:
    cart: list[CartLine] = field(default_factory=list)
    orders: list[Order] = field(default_factory=list)


class SessionStore:
    """Thread-safe token -> state map; an unknown token starts a clean state."""

    def __init__(self) -> None:
        self._states: dict[str, ShopState] = {}
        self._lock = threading.Lock()
        self._next_order = 1

    @staticmethod
    def new_token() -> str:
        return secrets.token_urlsafe(12)

    def state(self, token: str) -> ShopState:
        with self._lock:
            return self._states.setdefault(token, ShopState())

    def add_to_cart(self, token: str, line: CartLine) -> None:
        with self._lock:
            self._states.setdefault(token, ShopState()).cart.append(line)

    def place_order(self, token: str, lines: list[CartLine]) -> Order:
        """Turn ``lines`` into an order (and empty the cart)."""
        with self._lock:
            state = self._states.setdefault(token, ShopState())
            order = Order(self._next_order, tuple(lines))
            self._next_order += 1
            state.orders.append(order)
            state.cart.clear()
            return order

    def orders(self, token: str) -> list[Order]:
        with self._lock:
            state = self._states.get(token)
            return list(state.orders) if state else []

    def copy_state(self, token: str) -> ShopState:
        """A copy of ``token``'s cart and orders (a fork's snapshot of them)."""
        with self._lock:
            state = self._states.get(token) or ShopState()
            return ShopState(cart=list(state.cart), orders=list(state.orders))

    def adopt(self, token: str, state: ShopState) -> None:
        """Give ``token`` (a fork's child) its own copy of ``state``."""
        with self._lock:
            self._states[token] = ShopState(cart=list(state.cart), orders=list(state.orders))

    def drop(self, token: str) -> None:
        with self._lock:
            self._states.pop(token, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._states)
