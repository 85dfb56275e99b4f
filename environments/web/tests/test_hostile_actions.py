"""Hostile browsing: a tab reaches its own site and nothing else, bad URLs and actions are
error observations, and an episode made of them is scored, never masked.

The target a model would want is a real envhub server on another port of 127.0.0.1
(``/v1/environments``, ``/metrics``, the WebSocket API): it records every request, and
no test may leave a single one there. A hostile site (links, a form, a redirect and
scripts aimed at that server) shows that the page itself cannot reach it either.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest
from envhub_web.browser_tab import BrowserTab
from envhub_web.pool import find_chromium, get_pool
from envhub_web.tab import Tab
from envhub_web.text_tab import TextTab

import envhub
from envhub.errors import SandboxError, ToolError
from envhub.server import create_app
from envhub.task import GoldCall
from envhub.testing import free_port, replay_calls, serve_in_thread
from envhub.types import ToolCall

MODES = ["text", pytest.param("browser", marks=pytest.mark.chromium)]
NOT_ALLOWED = "is not allowed: only pages of this site"
NOT_VALID = "is not a valid URL"
#: text of the envhub server's answers that must never reach an observation
LEAKS = ("calculate", "envhub_", '"detail"', "session_id")


class Recorder:
    """An ASGI app in front of another that records every HTTP and WebSocket request."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: list[str] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            self.seen.append(f"{scope['type']} {scope['path']}")
        await self.app(scope, receive, send)


@pytest.fixture(scope="module")
def envhub_server() -> Iterator[tuple[str, Recorder]]:
    """A real ``envhub serve calc`` on another port: what a model must never reach."""
    recorder = Recorder(create_app(["calc"]))
    with serve_in_thread(recorder) as url:
        yield url, recorder


@pytest.fixture(scope="module")
def hostile_site(envhub_server: tuple[str, Recorder]) -> Iterator[str]:
    """A site whose links, form, redirect and scripts all aim at the envhub server."""
    target = envhub_server[0]
    ws_target = target.replace("http://", "ws://")
    pages = {
        "/": f"""<title>hostile</title>
            <a data-bid="leak" href="{target}/v1/environments">environments</a>
            <form method="post" action="{target}/v1/sessions">
              <input data-bid="env" name="env" value="calc">
              <button data-bid="send" type="submit">send</button>
            </form>""",
        "/scripts": f"""<title>scripts</title><img src="{target}/img.png">
            <p data-bid="out" id="out">waiting</p>
            <script>
              const report = [];
              const done = () => {{
                if (report.length === 2) document.getElementById("out").textContent =
                  report.sort().join("; ");
              }};
              fetch("{target}/v1/environments").then(r => r.text())
                .then(t => report.push("fetch read " + t.length))
                .catch(() => report.push("fetch failed")).finally(done);
              const ws = new WebSocket("{ws_target}/v1/ws");
              ws.onopen = () => {{ report.push("ws open"); done(); }};
              ws.onerror = () => {{ report.push("ws failed"); done(); }};
            </script>""",
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/go":
                self.send_response(302)
                self.send_header("Location", f"{target}/metrics")
                self.end_headers()
                return
            body = pages.get(self.path, "<title>missing</title>").encode()
            self.send_response(200 if self.path in pages else 404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()
    server.server_close()


def hostile_urls(target: str) -> list[tuple[str, str]]:
    """(url a model might try, what its error says): the envhub server under every
    spelling of 127.0.0.1, other schemes, and malformed URLs."""
    port = urlsplit(target).port
    return [
        (f"{target}/v1/environments", NOT_ALLOWED),
        (f"{target}/metrics", NOT_ALLOWED),
        (f"//127.0.0.1:{port}/metrics", NOT_ALLOWED),
        (f"http://localhost:{port}/metrics", NOT_ALLOWED),
        (f"http://0.0.0.0:{port}/metrics", NOT_ALLOWED),
        (f"http://[::ffff:127.0.0.1]:{port}/metrics", NOT_ALLOWED),
        (f"http://2130706433:{port}/metrics", NOT_ALLOWED),
        ("javascript:fetch('/metrics')", NOT_ALLOWED),
        ("file:///etc/passwd", NOT_ALLOWED),
        ("about:blank", NOT_ALLOWED),
        ("data:text/html,<h1>hi</h1>", NOT_ALLOWED),
        ("ht!tp://127.0.0.1/", NOT_VALID),
        ("http://127.0.0.1:99999/", NOT_VALID),
        ("http://[::1", NOT_VALID),
        ("/ca\trt", NOT_VALID),
    ]


def assert_nothing_reached(recorder: Recorder, *texts: str) -> None:
    assert recorder.seen == []
    for text in texts:
        for leak in LEAKS:
            assert leak not in text, text


@pytest.mark.parametrize("mode", MODES)
async def test_goto_opens_pages_of_the_site_only(
    mode: str, envhub_server: tuple[str, Recorder]
) -> None:
    target, recorder = envhub_server
    env = envhub.make("web", mode=mode)
    task = env.tasks.get("minishop-0-00004")
    session = await env.open(task.id)
    bad = hostile_urls(target)
    calls = [
        ToolCall(id=f"bad-{i}", name="goto", arguments={"url": u}) for i, (u, _) in enumerate(bad)
    ]
    result = await session.step(calls)  # one turn: the episode has 20
    contents = [observation.content for observation in result.observations]
    for (url, expected), observation in zip(bad, result.observations, strict=True):
        assert observation.is_error, (url, observation.content)
        assert expected in observation.content, (url, observation.content)
    for index, call in enumerate(task.gold_actions):  # the tab is still usable
        result = await session.step(
            [ToolCall(id=f"gold-{index}", name=call.name, arguments=call.arguments)]
        )
        assert not result.observations[0].is_error, result.observations[0].content
    closed = await session.close()
    assert closed.reward == 1.0
    assert closed.metrics.tool_errors == len(bad)
    assert_nothing_reached(recorder, *contents)


async def open_tab(mode: str, origin: str, nav_timeout_s: float = 10.0) -> Tab:
    if mode == "text":
        return TextTab({}, origin, nav_timeout_s=nav_timeout_s)
    pool = await get_pool(find_chromium() or "")
    return await BrowserTab.open(pool, [], origin, nav_timeout_s=nav_timeout_s)


@pytest.mark.parametrize("mode", MODES)
async def test_links_forms_and_redirects_of_a_page_stay_on_its_site(
    mode: str, hostile_site: str, envhub_server: tuple[str, Recorder]
) -> None:
    recorder = envhub_server[1]
    tab = await open_tab(mode, hostile_site)
    seen = []
    try:
        for action in (lambda: tab.click("leak"), lambda: tab.click("send")):
            await tab.goto("/")
            if mode == "text":  # refused before any request
                with pytest.raises(ToolError, match=NOT_ALLOWED):
                    await action()
            else:  # the navigation starts and fails: Chromium's error page
                await action()
                for _ in range(100):
                    if tab.url.startswith("chrome-error://"):
                        break
                    await asyncio.sleep(0.1)
                assert tab.url.startswith("chrome-error://"), tab.url
            seen.append(await tab.observe())
        expected = NOT_ALLOWED if mode == "text" else "did not load"
        with pytest.raises(ToolError, match=expected):
            await tab.goto("/go")  # a redirect to the envhub server
        seen.append(await tab.observe())
    finally:
        await tab.close()
    assert_nothing_reached(recorder, *seen)


@pytest.mark.chromium
async def test_scripts_of_a_page_cannot_reach_another_port(
    hostile_site: str, envhub_server: tuple[str, Recorder]
) -> None:
    recorder = envhub_server[1]
    tab = await open_tab("browser", hostile_site)
    assert isinstance(tab, BrowserTab)
    try:
        await tab.goto("/scripts")
        report = "waiting"
        for _ in range(100):
            report = await tab.evaluate("() => document.getElementById('out').textContent")
            if report != "waiting":
                break
            await asyncio.sleep(0.1)
        page = await tab.observe()
    finally:
        await tab.close()
    assert report == "fetch failed; ws failed"
    assert_nothing_reached(recorder, page)


@pytest.fixture
def silent_site() -> Iterator[str]:
    """A site that accepts connections and never answers."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)  # never served
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.server_close()


@pytest.mark.parametrize("mode", MODES)
async def test_a_page_of_the_site_that_never_answers_is_an_infrastructure_failure(
    mode: str, silent_site: str
) -> None:
    """The tab reaches its own site only, so a page that does not load is the site's
    failure, not the model's (test_slow_site.py runs whole episodes of it)."""
    tab = await open_tab(mode, silent_site, nav_timeout_s=2.0)
    try:
        with pytest.raises(SandboxError, match="/slow, a page of this episode's own site"):
            await tab.goto("/slow")
        with pytest.raises(ToolError, match=NOT_ALLOWED):  # refused before any request
            await tab.goto("http://127.0.0.1:9/")
    finally:
        await tab.close()


@pytest.mark.parametrize("mode", MODES)
async def test_a_site_that_refuses_connections_is_an_infrastructure_failure(mode: str) -> None:
    """The episode's own site being down is not the model's error (every episode would
    be scored 0), it masks the episode."""
    closed = f"http://127.0.0.1:{free_port()}"  # a port nothing listens on
    tab = await open_tab(mode, closed)
    try:
        with pytest.raises(SandboxError, match="refuses connections"):
            await tab.goto("/")
    finally:
        await tab.close()


def _call(name: str, **arguments: str) -> GoldCall:
    return GoldCall(name=name, arguments=arguments)


#: hostile calls for any browsing environment; each is an error observation
HOSTILE_CALLS = [
    _call("goto", url="javascript:alert(1)"),
    _call("goto", url="ht!tp://x"),
    _call("click", bid="no-such-element"),
    _call("scroll", direction="sideways"),
    _call("go_back"),  # nothing before the first page
    _call("no_such_tool"),
]


#: MiniShop only: a button is no text box (an error); a browser shortcut that would close
#: the tab (a dead page is infrastructure, masked) must reach the page as a key press only
WEB_EXTRA = [
    _call("fill", bid="search-button", text="x"),
    _call("press", bid="search-input", key="Control+w"),
]


@pytest.mark.parametrize(
    ("env_name", "mode", "task_id", "extra"),
    [
        ("web", "text", "minishop-0-00004", WEB_EXTRA),
        pytest.param(
            "web",
            "browser",
            "minishop-0-00004",
            WEB_EXTRA,
            marks=pytest.mark.chromium,
        ),
        pytest.param(
            "miniwob",
            "browser",
            None,
            [_call("goto", url="/")],  # another page of the site: allowed, no episode state
            marks=pytest.mark.chromium,
        ),
    ],
)
async def test_an_episode_of_hostile_calls_is_scored_not_masked(
    env_name: str,
    mode: str,
    task_id: str | None,
    extra: list[GoldCall],
    envhub_server: tuple[str, Recorder],
) -> None:
    target, recorder = envhub_server
    env = envhub.make(env_name, mode=mode)
    task_id = task_id or (await env.task_ids())[0]
    leak = _call("goto", url=f"{target}/metrics")
    calls = [leak, *HOSTILE_CALLS, *extra, _call("finish", answer="")]
    trajectory = await replay_calls(env, task_id, calls)
    assert not trajectory.masked, trajectory.error
    assert trajectory.metrics.episode_attempts == 1
    assert trajectory.stop_reason == "terminal_tool"
    assert trajectory.reward == 0.0
    errors = 1 + len(HOSTILE_CALLS) + (1 if extra[0].name == "fill" else 0)
    assert trajectory.metrics.tool_errors == errors
    tool_messages = [m["content"] for m in trajectory.messages if m["role"] == "tool"]
    assert tool_messages[-1] == "episode finished"
    assert_nothing_reached(recorder, *tool_messages)
