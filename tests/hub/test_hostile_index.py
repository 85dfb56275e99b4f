"""An index is untrusted (issue 32): ``envhub search``, ``info`` and ``install`` meet an
unreachable index, one answering 500 or malformed JSON, a name that is not an envhub
plugin, and wheels whose card is missing, not JSON, malformed, too large, of a newer
schema or whose bytes do not match the index's hash. Each is one ``error:`` line on
stderr and exit 2, never a traceback.

The index is a small PEP 691 JSON server in a thread (the round trip's pypiserver answers
PEP 503 HTML, so both forms are read), serving hand-made wheels.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from envhub._util.net import free_port
from envhub.errors import CardError, EnvhubError, InvalidRequest, PackageIndexError
from envhub.hub.index import PackageIndex
from tests.hub.indexes import one_line_error, run_envhub, write_wheel

_ENVIRONMENT = {
    "name": "good", "version": "1.0", "tasks": {"train": 2},
    "tools": [{"type": "function", "function": {"name": "submit", "parameters": {}}}],
    "check": {"ok": True, "checked": 2},
}  # fmt: skip


def _card(name: str, **fields: object) -> bytes:
    card = {"card_schema": 1, "distribution": f"envhub-rl-{name}", "version": "1.0",
            "checked_with": "0.2.0", "environments": [_ENVIRONMENT], **fields}  # fmt: skip
    return json.dumps(card).encode()


CARDS: dict[str, bytes | None] = {
    "good": _card("good", summary="a good plugin"),
    "nocard": None,
    "notjson": b"{not json",
    "badcard": json.dumps({"card_schema": 1, "distribution": "envhub-rl-badcard"}).encode(),
    "hugecard": _card("hugecard", summary="x" * (2 << 20)),
    "newer": _card("newer", card_schema=2),
}


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The server's root: ``ok/simple/`` (the wheels above and ``sampleproject``),
    ``badhash/simple/`` (every hash wrong), ``broken/simple/`` (500s) and
    ``garbage/simple/`` (JSON that is not) and ``endless/simple/`` (a page without end)."""
    folder = tmp_path_factory.mktemp("wheels")
    wheels = {f"envhub-rl-{name}": write_wheel(folder, f"envhub-rl-{name}", "1.0", card=card)
              for name, card in CARDS.items()}  # fmt: skip
    wheels["sampleproject"] = write_wheel(folder, "sampleproject", "1.0")
    port = free_port()
    root = f"http://127.0.0.1:{port}/"

    class Index(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _answer(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            mode, _, rest = self.path.strip("/").partition("/")
            json_kind = "application/vnd.pypi.simple.v1+json"
            if mode == "files" and (folder / rest).is_file():
                return self._answer(200, (folder / rest).read_bytes(), "application/zip")
            if mode == "broken":
                return self._answer(500, b"Internal Server Error", "text/plain")
            if mode == "garbage":
                return self._answer(200, b'{"projects": [', json_kind)
            if mode == "endless":  # a page that never ends: no length, chunks until cut off
                self.send_response(200)
                self.send_header("Content-Type", json_kind)
                self.end_headers()
                with contextlib.suppress(OSError):
                    while True:
                        self.wfile.write(b" " * 65536)
                return None
            project = rest.removeprefix("simple").strip("/")
            if not project:
                page = {"meta": {"api-version": "1.0"},
                        "projects": [{"name": name} for name in wheels]}  # fmt: skip
                return self._answer(200, json.dumps(page).encode(), json_kind)
            if project not in wheels:
                return self._answer(404, b"not found", "text/plain")
            wheel = wheels[project]
            digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
            page = {"meta": {"api-version": "1.0"}, "name": project, "files": [{
                "filename": wheel.name, "url": f"{root}files/{wheel.name}",
                "hashes": {"sha256": "0" * 64 if mode == "badhash" else digest},
            }]}  # fmt: skip
            self._answer(200, json.dumps(page).encode(), json_kind)

    server = ThreadingHTTPServer(("127.0.0.1", port), Index)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root
    server.shutdown()
    server.server_close()


def test_search_lists_plugins_with_cards_and_says_why_others_are_skipped(index: str) -> None:
    found = run_envhub("search", "--index", f"{index}ok/simple/")
    assert found.returncode == 0, found.stderr
    assert "envhub-rl-good 1.0: a good plugin" in found.stdout
    assert "good: 2 tasks (train 2); tools submit" in found.stdout
    skipped = found.stderr
    for name in ("nocard", "notjson", "badcard", "hugecard", "newer"):
        assert f"warning: envhub-rl-{name} skipped: " in skipped, skipped
        assert f"envhub-rl-{name}" not in found.stdout
    assert "sampleproject" not in found.stdout + skipped  # not an envhub plugin: not listed


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("nocard", "has no envhub card: it was not published with envhub publish"),
        ("notjson", "its card is not JSON"),
        ("badcard", "malformed card (version: Field required)"),
        ("hugecard", "its card is over 1048576 bytes"),
        ("newer", "its card has schema 2, newer than this envhub reads (1): upgrade envhub-rl"),
    ],
)
def test_a_missing_or_bad_card_is_a_card_error(index: str, name: str, message: str) -> None:
    with PackageIndex(f"{index}ok/simple/") as hub, pytest.raises(CardError) as caught:
        hub.card(f"envhub-rl-{name}")
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("mode", "name", "message"),
    [
        ("ok", "sampleproject", "'sampleproject' is not an envhub plugin"),
        ("ok", "envhub-rl-absent", "has no envhub-rl-absent"),
        ("broken", "envhub-rl-good", "answered 500 Internal Server Error"),
        ("garbage", "envhub-rl-good", "malformed JSON"),
        ("badhash", "envhub-rl-good", "its sha256 is not the one the index gives"),
    ],
)
def test_a_bad_name_or_answer_is_an_index_error(
    index: str, mode: str, name: str, message: str
) -> None:
    with PackageIndex(f"{index}{mode}/simple/") as hub:
        with pytest.raises(EnvhubError) as caught:
            hub.card(name)
    assert message in str(caught.value)
    assert isinstance(caught.value, (PackageIndexError, InvalidRequest))


def test_a_page_without_end_is_cut_off_at_the_limit(
    index: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("envhub.hub.index.MAX_PAGE_BYTES", 1 << 20)
    with PackageIndex(f"{index}endless/simple/") as hub, pytest.raises(PackageIndexError) as caught:
        hub.projects()
    assert "the page is over 1 MiB: not read" in str(caught.value)


@pytest.mark.parametrize(
    ("args", "mode", "message"),
    [
        (["info", "envhub-rl-nocard"], "ok", "has no envhub card"),
        (["info", "envhub-rl-good==2.0"], "ok", "has no wheel of envhub-rl-good 2.0"),
        (["install", "sampleproject"], "ok", "'sampleproject' is not an envhub plugin"),
        (["install", "envhub-rl-good>=1"], "ok", "give NAME or NAME==VERSION"),
        (["search"], "broken", "answered 500 Internal Server Error"),
        (["install", "envhub-rl-good"], "garbage", "malformed JSON"),
    ],
)
def test_the_commands_print_one_line_and_exit_2(
    index: str, args: list[str], mode: str, message: str
) -> None:
    error = one_line_error(run_envhub(*args, "--index", f"{index}{mode}/simple/"))
    assert message in error, error


def test_an_unreachable_index_is_one_clear_error() -> None:
    url = f"http://127.0.0.1:{free_port()}/simple/"
    error = one_line_error(run_envhub("search", "--index", url))
    assert f"cannot reach the package index at {url}" in error, error


def test_publish_refuses_what_is_not_a_plugin_project(tmp_path: Path) -> None:
    error = one_line_error(run_envhub("publish", str(tmp_path), "--upload-url", "http://x/"))
    assert "is not a plugin project: it has no pyproject.toml" in error
