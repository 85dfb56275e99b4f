"""The environment-client seam holds: consumers are typed against the protocols only.

Rollout, stream, check, the trainer adapters, the gymnasium adapter, testing and the CLI
reach an environment through :class:`envhub.protocol.EnvironmentClient` and
:class:`envhub.protocol.SessionHandle`. A consumer that tests which transport it holds
(``isinstance(env, LocalEnvironment)``, ``inspect.isawaitable`` on a client's answer,
duck-typed ``getattr(env, "tasks")``) means the two sides drifted and one transport gets
behaviour the other lacks; this test names the file and line.
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
