"""The MiniShop web app (FastAPI + Jinja): search, product pages with options, cart, buy.

Every control a task needs carries a ``data-bid`` attribute (``search-input``,
``product-<asin>``, ``opt-<option>``, ``buy``...), so element ids are stable and the
same gold actions work in the text and the browser mode. The session cookie selects
the visitor's state in the :class:`SessionStore`; a visitor without one gets a fresh
token, so the site is usable from any browser too.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment as Jinja
from jinja2 import PackageLoader, select_autoescape

from envhub_web.catalog import CATEGORIES, Catalog, Product
from envhub_web.state import COOKIE, CartLine, SessionStore

__all__ = ["create_app"]

_templates = Jinja(loader=PackageLoader("envhub_web", "templates"), autoescape=select_autoescape())


def create_app(
    catalog: Catalog, store: SessionStore, static_dirs: dict[str, Path] | None = None
) -> FastAPI:
    """The MiniShop app; ``static_dirs`` mounts extra read-only sites (MiniWoB pages)."""
    app = FastAPI(title="MiniShop", docs_url=None, redoc_url=None, openapi_url=None)

    @app.middleware("http")
    async def session_cookie(request: Request, call_next: Any) -> Response:
        token = request.cookies.get(COOKIE)
        request.state.token = token or store.new_token()
        response = await call_next(request)
        if token is None:
            response.set_cookie(COOKIE, request.state.token, httponly=True, samesite="lax")
        return response

    def render(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        state = store.state(request.state.token)
        context.setdefault("query", "")
        html = _templates.get_template(template).render(cart_size=len(state.cart), **context)
        return HTMLResponse(html, status_code=status)

    def product_or_404(request: Request, asin: str) -> Product | HTMLResponse:
        product = catalog.by_asin.get(asin)
        if product is None:
            return render(request, "error.html", 404, message=f"No product with ASIN {asin}.")
        return product

    @app.get("/", response_class=HTMLResponse)
    async def home(request: Request) -> HTMLResponse:
        return render(
            request,
            "home.html",
            product_count=len(catalog.products),
            categories=[c.path for c in CATEGORIES],
        )

    @app.get("/search", response_class=HTMLResponse)
    async def search(request: Request, q: str = "", page: int = 1) -> HTMLResponse:
        if not q.strip():
            return render(request, "error.html", 400, message="Type something to search for.")
        page = max(page, 1)
        products, total = catalog.page(q, page)
        pages = max(1, math.ceil(total / catalog.PAGE_SIZE))
        return render(
            request, "results.html", query=q, page=page, pages=pages, total=total, products=products
        )

    @app.get("/item/{asin}", response_class=HTMLResponse)
    async def item(request: Request, asin: str, q: str = "", page: int = 1) -> HTMLResponse:
        product = product_or_404(request, asin)
        if isinstance(product, HTMLResponse):
            return product
        return render(request, "item.html", product=product, query=q, page=page)

    async def chosen_line(request: Request, product: Product) -> CartLine | HTMLResponse:
        form = await request.form()
        options: dict[str, str] = {}
        for name, values in product.options.items():
            value = str(form.get(name) or "")
            if value not in values:
                return render(request, "error.html", 400, message=f"Please choose a {name}.")
            options[name] = value
        return CartLine(product.asin, options, product.price)

    @app.post("/buy/{asin}")
    async def buy(request: Request, asin: str) -> Response:
        product = product_or_404(request, asin)
        if isinstance(product, HTMLResponse):
            return product
        line = await chosen_line(request, product)
        if isinstance(line, HTMLResponse):
            return line
        order = store.place_order(request.state.token, [line])
        return RedirectResponse(f"/order/{order.order_id}", status_code=303)

    @app.post("/cart/add/{asin}")
    async def add_to_cart(request: Request, asin: str) -> Response:
        product = product_or_404(request, asin)
        if isinstance(product, HTMLResponse):
            return product
        line = await chosen_line(request, product)
        if isinstance(line, HTMLResponse):
            return line
        store.add_to_cart(request.state.token, line)
        return RedirectResponse("/cart", status_code=303)

    @app.get("/cart", response_class=HTMLResponse)
    async def cart(request: Request) -> HTMLResponse:
        lines = store.state(request.state.token).cart
        return render(request, "cart.html", lines=[(x, catalog.by_asin[x.asin]) for x in lines])

    @app.post("/checkout")
    async def checkout(request: Request) -> Response:
        lines = list(store.state(request.state.token).cart)
        if not lines:
            return render(request, "error.html", 400, message="Your cart is empty.")
        order = store.place_order(request.state.token, lines)
        return RedirectResponse(f"/order/{order.order_id}", status_code=303)

    @app.get("/order/{order_id}", response_class=HTMLResponse)
    async def order(request: Request, order_id: int) -> HTMLResponse:
        found = [o for o in store.orders(request.state.token) if o.order_id == order_id]
        if not found:
            return render(
                request, "error.html", 404, message=f"No order {order_id} in this session."
            )
        lines = [(x, catalog.by_asin[x.asin]) for x in found[0].lines]
        return render(request, "order.html", order=found[0], lines=lines)

    for prefix, directory in (static_dirs or {}).items():
        app.mount(prefix, StaticFiles(directory=directory, html=True), name=prefix.strip("/"))
    return app
