"""Putting new weights on the inference servers: the :class:`WeightSync` protocol.

:meth:`RolloutStream.update_weights <envhub.rollout.RolloutStream.update_weights>` drives
one in three steps, with the stream's generation gate closed throughout:
``pause(abort=...)``, ``load(version)``, ``resume()``. ``abort=True`` asks the servers to
end the requests in flight at once, each returning what it sampled so far with
``finish_reason "abort"`` (the ``abort-and-*`` policies); ``abort=False`` comes after
the stream let them finish (``finish``). A sync whose servers cannot abort says so
(``aborts_requests = False``); the stream then cancels those requests on the client side.

Implementations:

* :class:`NoopSync`: the trainer updates the servers itself (NCCL broadcast, a Ray
  actor, ...); the sync only awaits an optional ``on_load(version)`` hook.
* :class:`SGLangSync`: SGLang's HTTP API: ``POST /pause_generation`` (``mode`` ``abort``
  or ``in_place``), ``POST /update_weights_from_disk`` (``model_path``,
  ``weight_version``, and ``load_format`` when one is given), ``POST
  /continue_generation``; afterwards ``GET /get_model_info`` must report the new
  ``weight_version`` (servers that omit the field are trusted).
* :class:`VLLMSync`: vLLM's RL endpoints: ``POST /pause?mode=abort|wait``, ``POST
  /collective_rpc`` (``reload_weights`` by default: the workers reload the checkpoint
  from the path the server was started with, which the trainer overwrites; another
  worker method and its kwargs can be named), ``POST /resume``. ``/collective_rpc``
  (and ``/pause`` / ``/resume`` in vLLM releases before the RL router) exist only when
  the server runs with ``VLLM_SERVER_DEV_MODE=1``.

Each HTTP sync talks to every server of the pool at once (servers are the roots, not
``.../v1``; a trailing ``/v1`` is dropped) and raises
:class:`~envhub.errors.WeightUpdateFailed` naming the servers that failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from envhub.errors import WeightUpdateFailed

if TYPE_CHECKING:
    import aiohttp

__all__ = [
    "NoopSync",
    "SGLangSync",
    "VLLMSync",
    "WeightSync",
    "parse_version",
    "reported_version",
]


def parse_version(value: Any) -> int | None:
    """A weight version a server reported (a header, a ``/models`` field, SGLang's
    ``meta_info.weight_version``): an integer, or a string of one (``"7"``); ``None`` for
    anything else. Servers' labels are free text (SGLang's is ``"default"`` until an update
    names one) while envhub's versions are integers, so a label that is not one is not a
    version envhub can record, and the turn keeps the client's."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def reported_version(headers: Any, name: str | None) -> int | None:
    """The weight version a server reports in response header ``name`` (a policy's
    ``weight_version_header``); ``None`` when unset, absent or not an integer
    (:func:`parse_version`)."""
    return parse_version(headers.get(name)) if name is not None else None


@runtime_checkable
class WeightSync(Protocol):
    """Pauses the inference servers, loads a weight version, resumes them."""

    aborts_requests: bool
    """Whether ``pause(abort=True)`` makes the servers return partial completions."""

    async def pause(self, *, abort: bool) -> None: ...

    async def load(self, version: int) -> None: ...

    async def resume(self) -> None: ...


class NoopSync:
    """Servers the trainer updates itself: ``load`` awaits ``on_load(version)`` (for
    instance the trainer's broadcast), or nothing. Nothing is aborted on the server."""

    aborts_requests = False

    def __init__(self, on_load: Callable[[int], Awaitable[None]] | None = None) -> None:
        self.on_load = on_load

    async def pause(self, *, abort: bool) -> None:
        return None

    async def load(self, version: int) -> None:
        if self.on_load is not None:
            await self.on_load(version)

    async def resume(self) -> None:
        return None


class _HTTPSync:
    """Shared by the HTTP syncs: one JSON POST (or GET) to every server at once."""

    aborts_requests = True

    def __init__(self, urls: list[str], *, timeout_s: float) -> None:
        if not urls:
            raise ValueError("a weight sync needs at least one server URL")
        self.urls = [url.rstrip("/").removesuffix("/v1") for url in urls]
        self._timeout_s = timeout_s

    async def _all(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Send to every server; the replies' JSON objects (``{}`` for a non-object).
        aiohttp (the ``rollout`` extra) is imported here, not with the module: the rollout
        engine imports this module, and a run without model servers (``envhub check``, the
        reference policy) must work on the core install."""
        import aiohttp

        async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self._timeout_s)
        ) as session:
            results = await asyncio.gather(
                *(self._one(session, method, url + path, body) for url in self.urls),
                return_exceptions=True,
            )
        failures = [
            f"{url}: {type(r).__name__}: {r}"
            for url, r in zip(self.urls, results, strict=True)
            if isinstance(r, BaseException)
        ]
        if failures:
            raise WeightUpdateFailed(f"{method} {path} failed on " + "; ".join(failures))
        return [r for r in results if not isinstance(r, BaseException)]

    @staticmethod
    async def _one(
        session: aiohttp.ClientSession, method: str, url: str, body: dict[str, Any] | None
    ) -> dict[str, Any]:
        async with session.request(method, url, json=body) as response:
            text = await response.text()
            if response.status >= 400:
                raise WeightUpdateFailed(f"HTTP {response.status}: {text[:300]}")
        import orjson

        try:
            data = orjson.loads(text) if text.strip() else {}
        except orjson.JSONDecodeError:
            return {}
        return data if isinstance(data, dict) else {}


class SGLangSync(_HTTPSync):
    """SGLang servers loading each version from disk (see the module docstring).

    ``model_path(version)`` is the checkpoint directory the trainer wrote for that
    version (a ``str.format`` template with ``{version}`` works too). ``load_format``
    (e.g. ``"safetensors"``, ``"auto"``) is sent with each load when given: the
    checkpoint's format when it differs from what the server was started with;
    without it SGLang uses its own (the server's ``--load-format``)."""

    def __init__(
        self,
        urls: list[str],
        model_path: Callable[[int], str] | str,
        *,
        load_format: str | None = None,
        timeout_s: float = 600.0,
    ) -> None:
        super().__init__(urls, timeout_s=timeout_s)
        self.model_path = model_path
        self.load_format = load_format

    async def pause(self, *, abort: bool) -> None:
        await self._all("POST", "/pause_generation", {"mode": "abort" if abort else "in_place"})

    async def load(self, version: int) -> None:
        path = (
            self.model_path.format(version=version)
            if isinstance(self.model_path, str)
            else self.model_path(version)
        )
        body: dict[str, Any] = {"model_path": path, "weight_version": str(version)}
        if self.load_format is not None:
            body["load_format"] = self.load_format
        for url, reply in zip(
            self.urls, await self._all("POST", "/update_weights_from_disk", body), strict=True
        ):
            if reply.get("success") is False:
                raise WeightUpdateFailed(f"{url}: {reply.get('message') or 'update refused'}")
        for url, info in zip(self.urls, await self._all("GET", "/get_model_info"), strict=True):
            served = info.get("weight_version")
            if served is not None and str(served) != str(version):
                raise WeightUpdateFailed(f"{url} serves weight version {served}, not {version}")

    async def resume(self) -> None:
        await self._all("POST", "/continue_generation", {})


class VLLMSync(_HTTPSync):
    """vLLM servers (``VLLM_SERVER_DEV_MODE=1``) reloading weights through a worker RPC
    (see the module docstring). ``rpc_kwargs(version)`` gives the method's keyword
    arguments (none by default)."""

    def __init__(
        self,
        urls: list[str],
        *,
        rpc_method: str = "reload_weights",
        rpc_kwargs: Callable[[int], dict[str, Any]] | None = None,
        timeout_s: float = 600.0,
    ) -> None:
        super().__init__(urls, timeout_s=timeout_s)
        self.rpc_method = rpc_method
        self.rpc_kwargs = rpc_kwargs

    async def pause(self, *, abort: bool) -> None:
        await self._all("POST", f"/pause?mode={'abort' if abort else 'wait'}")

    async def load(self, version: int) -> None:
        kwargs = self.rpc_kwargs(version) if self.rpc_kwargs is not None else {}
        await self._all("POST", "/collective_rpc", {"method": self.rpc_method, "kwargs": kwargs})

    async def resume(self) -> None:
        await self._all("POST", "/resume")
