"""The environment-client seam holds: consumers are typed against the protocols only.

Rollout, stream, check, the trainer adapters, the gymnasium adapter, testing and the CLI
reach an environment through :class:`envhub.protocol.EnvironmentClient` and
:class:`envhub.protocol.SessionHandle`. A consumer that tests which transport it holds
(``isinstance(env, LocalEnvironment)``, ``inspect.isawaitable`` on a client's answer,
duck-typed ``getattr(env, "tasks")``) means the two sides drifted and one transport gets
behaviour the other lacks; this test names the file and line.

The implementations are found, not listed: every class of the package that implements a
protocol (in ``envhub/clients/``, the server's MCP store client in ``server/mcp.py``, the
fleet, wrappers such as the agents' logged session) must be pinned to it statically, so
``mypy`` (``.ci/typecheck.sh``) checks each one against the protocol.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

import envhub
from envhub.clients.pooled import PooledEnvironment
from envhub.clients.remote import RemoteEnvironment
from envhub.protocol import EnvironmentClient, SessionHandle
from envhub.server.mcp import StoreEnvironment
from envhub.server.metrics import ServerMetrics
from envhub.server.store import SessionStore

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [ROOT / "envhub"]
# envhub as installed: server/, sandboxes/ and rewards/ are envhub.server etc.
INSTALLED = [ROOT / "envhub", ROOT / "server", ROOT / "sandboxes", ROOT / "rewards"]
# The transports themselves: every module of envhub/clients/ and the protocol they
# implement. (The server's store client, server/mcp.py, is the one transport outside.)
TRANSPORTS = {*(ROOT / "envhub" / "clients").rglob("*.py"), ROOT / "envhub" / "protocol.py"}
CONCRETE = {"LocalEnvironment", "RemoteEnvironment", "Session", "RemoteSession"}
# attributes only one transport has: reading them with getattr/hasattr is a transport test
ONE_SIDED = {"tasks", "tools", "new_session", "env_class", "budgets", "messages", "closed"}


def _consumer_modules() -> list[Path]:
    return sorted(
        path
        for package in PACKAGES
        for path in package.rglob("*.py")
        if path not in TRANSPORTS
    )


def _names(node: ast.expr) -> set[str]:
    """Class names an ``isinstance`` second argument mentions (``A``, ``m.A``, tuples)."""
    if isinstance(node, ast.Tuple):
        return set().union(*(_names(e) for e in node.elts))
    if isinstance(node, ast.Attribute):
        return {node.attr}
    if isinstance(node, ast.Name):
        return {node.id}
    return set()


def transport_tests(source: str) -> list[tuple[int, str]]:
    """(line, what) for each place ``source`` tests which transport it holds."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in ("isinstance", "issubclass") and len(node.args) == 2:
            hit = _names(node.args[1]) & CONCRETE
            if hit:
                found.append((node.lineno, f"{name}(..., {', '.join(sorted(hit))})"))
        elif name == "isawaitable":
            found.append((node.lineno, "inspect.isawaitable (every client method is async)"))
        elif name in ("getattr", "hasattr") and len(node.args) >= 2:
            key = node.args[1]
            if isinstance(key, ast.Constant) and key.value in ONE_SIDED:
                found.append((node.lineno, f"{name}(..., {key.value!r})"))
    return found


def test_no_consumer_tests_which_transport_it_holds() -> None:
    offences = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in _consumer_modules()
        for line, what in transport_tests(path.read_text("utf-8"))
    ]
    assert not offences, "the seam leaked (type against envhub.protocol):\n" + "\n".join(offences)


def test_the_guard_sees_each_kind_of_transport_test() -> None:
    leaky = (
        "from envhub.clients.local import LocalEnvironment\n"
        "import inspect\n"
        "def tools(env):\n"
        "    if isinstance(env, (str, LocalEnvironment)):\n"
        "        return env.tools\n"
        "    ids = env.task_ids()\n"
        "    if inspect.isawaitable(ids):\n"
        "        pass\n"
        "    return getattr(env, 'tasks', None)\n"
    )
    assert [line for line, _ in transport_tests(leaky)] == [4, 7, 9]
    assert transport_tests("isinstance(env, EnvironmentClient)\ngetattr(x, 'name')\n") == []


def test_consumers_are_typed_against_the_protocols() -> None:
    """A parameter or return annotated with a concrete client ties a consumer to one
    transport; constructing one (a factory turning a name or URL into a client) is fine."""
    offences = []
    for path in _consumer_modules():
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            annotations = [a.annotation for a in (*node.args.args, *node.args.kwonlyargs)]
            for annotation in [*annotations, node.returns]:
                if annotation is None:
                    continue
                hit = {n.id for n in ast.walk(annotation) if isinstance(n, ast.Name)}
                hit |= {n.value for n in ast.walk(annotation) if isinstance(n, ast.Constant)}
                concrete = hit & (CONCRETE - {"Session"})
                if concrete:
                    offences.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.name} "
                                    f"takes or returns {', '.join(sorted(concrete))}")
    assert not offences, "\n".join(offences)


def implementations(source: str) -> list[tuple[int, str, str]]:
    """(line, class, protocol) for each class in ``source`` that implements the seam: a
    :class:`SessionHandle` inherits :class:`~envhub.protocol.ClosingOnExit` (the shared
    ``async with``), an :class:`EnvironmentClient`'s ``open`` returns ``OpeningSession``."""
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        bases = {ast.unparse(base).rpartition(".")[2] for base in node.bases}
        if "Protocol" in bases:  # the seam itself
            continue
        if "ClosingOnExit" in bases:
            found.append((node.lineno, node.name, "SessionHandle"))
        for item in node.body:
            if (isinstance(item, ast.FunctionDef) and item.name == "open" and item.returns
                    and ast.unparse(item.returns).strip("'\"") == "OpeningSession"):
                found.append((node.lineno, node.name, "EnvironmentClient"))
    return found


def static_checks(source: str) -> set[tuple[str, str]]:
    """(class, protocol) for each ``_x: type[Protocol] = Class`` in ``source``: the
    assignment that makes mypy check ``Class`` against ``Protocol``."""
    pinned: set[tuple[str, str]] = set()
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Name)
                and isinstance(node.annotation, ast.Subscript)
                and ast.unparse(node.annotation.value) == "type"):
            pinned.add((node.value.id, ast.unparse(node.annotation.slice)))
    return pinned


def _installed_modules() -> list[Path]:
    return sorted(path for package in INSTALLED for path in package.rglob("*.py"))


def test_every_implementation_is_checked_against_its_protocol() -> None:
    """Wherever an implementation lives, it is found here and must be pinned (in its
    module or another) so that the type check holds it to the protocol; a new client in
    ``envhub/clients/`` or elsewhere cannot skip the check by not being listed."""
    sources = {path: path.read_text("utf-8") for path in _installed_modules()}
    pinned = set().union(*(static_checks(source) for source in sources.values()))
    found = {
        (path, line, name, protocol)
        for path, source in sources.items()
        for line, name, protocol in implementations(source)
    }
    where = {path.relative_to(ROOT).parts[:2] for path, *_ in found}
    assert ("envhub", "clients") in where and ("server", "mcp.py") in where, where
    offences = [
        f"{path.relative_to(ROOT)}:{line}: {name} implements {protocol} but no "
        f"`if TYPE_CHECKING: _x: type[{protocol}] = {name}` checks it"
        for path, line, name, protocol in sorted(found)
        if (name, protocol) not in pinned
    ]
    assert not offences, "\n".join(offences)


def test_the_guard_finds_implementations_and_their_pins() -> None:
    source = (
        "class Seam(typing.Protocol):\n"
        "    def open(self) -> OpeningSession: ...\n"
        "class Handle(protocol.ClosingOnExit):\n"
        "    pass\n"
        "class Client:\n"
        "    def open(self, task_id=None) -> 'OpeningSession':\n"
        "        pass\n"
        "class Other:\n"
        "    def open(self) -> int:\n"
        "        pass\n"
        "if TYPE_CHECKING:\n"
        "    _client: type[EnvironmentClient] = Client\n"
        "    _other: list[int] = []\n"
    )
    assert implementations(source) == [(3, "Handle", "SessionHandle"),
                                       (5, "Client", "EnvironmentClient")]
    assert static_checks(source) == {("Client", "EnvironmentClient")}


def test_every_transport_is_an_environment_client() -> None:
    local = envhub.make("calc")
    remote = RemoteEnvironment("http://127.0.0.1:9", "calc", transport="http")
    pooled = PooledEnvironment(["http://127.0.0.1:9"], "calc", transport="http")

    async def sessions() -> None:
        store = SessionStore({"calc": local}, max_sessions=4, session_ttl_s=60.0,
                             metrics=ServerMetrics())
        try:
            for client in (local, remote, pooled, StoreEnvironment(store, "calc")):
                assert isinstance(client, EnvironmentClient), type(client).__name__
            for client in (local, StoreEnvironment(store, "calc")):
                async with client.open("calc-0-00001") as session:
                    assert isinstance(session, SessionHandle), type(session).__name__
        finally:
            await store.shutdown()
            await remote.aclose()
            await pooled.aclose()

    asyncio.run(sessions())


def test_the_remote_transport_says_it_gives_no_whole_tasks() -> None:
    remote = RemoteEnvironment("http://127.0.0.1:9", "calc", transport="http")
    with pytest.raises(NotImplementedError, match="task ids"):
        asyncio.run(remote.task("calc-0-00001"))
