"""A Python package index, read through its simple API: projects, files, cards.

envhub's hub is any index pip installs from (PyPI, devpi, Artifactory, a ``pypiserver``
on the team's machine), not a service of its own. This module reads one: it asks for the
PEP 691 JSON form of the simple API and reads the PEP 503 HTML form when that is what
the index answers (``pypiserver`` does), so both work and nothing is configured.

An envhub plugin on an index is a project named ``envhub-rl-<name>`` whose wheel holds a
card (:mod:`envhub.hub.card`); the card is read from a downloaded wheel, bounded in size
and checked against the hash the index gives. The index is untrusted: an unreachable
one, an error status, a page that is not a simple API page, a file over the size bound
or with the wrong hash is a :class:`~envhub.errors.PackageIndexError` with one line that
says which, never a traceback.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag, urljoin, urlsplit, urlunsplit

import httpx
from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import Version

from envhub.errors import CardError, InvalidRequest, PackageIndexError
from envhub.hub import DEFAULT_INDEX_URL, INDEX_URL_ENV, PLUGIN_PREFIX
from envhub.hub.card import Card, read_card
from envhub.registry import CORE_DISTRIBUTION

__all__ = [
    "MAX_PAGE_BYTES",
    "MAX_WHEEL_BYTES",
    "IndexFile",
    "PackageIndex",
    "plugin_project",
    "redact",
    "resolve_index_url",
]

MAX_WHEEL_BYTES = 256 << 20
"""The largest wheel downloaded to read its card (256 MiB)."""

MAX_PAGE_BYTES = 128 << 20
"""The largest simple API page read (128 MiB): an index is untrusted, and one answering
without end must not fill this machine's memory. PyPI's whole project list, the largest
page a real index serves, is a few tens of MiB."""

_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
_JSON = "application/vnd.pypi.simple.v1+json"


def resolve_index_url(given: str | None) -> str:
    """The index to use: ``given`` (``--index``), else ``$ENVHUB_INDEX_URL``, else PyPI;
    always ending in ``/`` (simple API URLs are folders)."""
    url = given or os.environ.get(INDEX_URL_ENV) or DEFAULT_INDEX_URL
    if urlsplit(url).scheme not in ("http", "https"):
        raise InvalidRequest(f"index URL {redact(url)!r} is not http(s)://...")
    return url if url.endswith("/") else url + "/"


def redact(url: str) -> str:
    """``url`` without a password in it (``https://user:***@host/``): URLs are printed."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def plugin_project(name: str) -> str:
    """The normalized project name of plugin ``name`` (``envhub-rl-calc``);
    :class:`InvalidRequest` for a name that is not an envhub plugin's."""
    project = canonicalize_name(name)
    if not project.startswith(PLUGIN_PREFIX):
        hint = f" (did you mean {PLUGIN_PREFIX}{project}?)" if project != CORE_DISTRIBUTION else ""
        raise InvalidRequest(
            f"{name!r} is not an envhub plugin: plugins are distributions named "
            f"{PLUGIN_PREFIX}<name>{hint}"
        )
    return project


@dataclass(frozen=True)
class IndexFile:
    """One file of a project on the index."""

    filename: str
    url: str
    sha256: str | None

    @property
    def wheel_version(self) -> Version | None:
        """The version a wheel's name gives (``None``: not a wheel, or a malformed name)."""
        try:
            return parse_wheel_filename(self.filename)[1]
        except InvalidWheelFilename:
            return None


class _Anchors(HTMLParser):
    """The ``<a href>`` anchors of a PEP 503 page: (text, href)."""

    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href") or ""
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.anchors.append(("".join(self._text).strip(), self._href))
            self._href = None


@dataclass(frozen=True)
class _Answer:
    """An index's answer to a GET: what :meth:`PackageIndex._page` reads of it."""

    status: int
    content_type: str
    body: bytes
    encoding: str


class PackageIndex:
    """The simple API at ``url`` (e.g. ``http://127.0.0.1:8080/simple/``)."""

    def __init__(self, url: str, *, timeout_s: float = 30.0) -> None:
        self.url = url if url.endswith("/") else url + "/"
        self._client = httpx.Client(timeout=timeout_s, follow_redirects=True)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> PackageIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _get(self, url: str, **headers: str) -> _Answer:
        """``GET url``, its body read up to :data:`MAX_PAGE_BYTES`; :class:`PackageIndexError`
        when it cannot be reached, answers an error status (a 404 is left to the caller)
        or sends more."""
        try:
            with self._client.stream("GET", url, headers=headers) as response:
                if response.status_code >= 400 and response.status_code != 404:
                    raise PackageIndexError(
                        f"the package index at {redact(self.url)} answered "
                        f"{response.status_code} {response.reason_phrase} for {redact(url)}"
                    )
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > MAX_PAGE_BYTES:
                        raise PackageIndexError(
                            f"{redact(url)}: the page is over {MAX_PAGE_BYTES >> 20} MiB: not read"
                        )
        except httpx.HTTPError as exc:
            raise PackageIndexError(
                f"cannot reach the package index at {redact(self.url)}: "
                f"{type(exc).__name__}: {str(exc) or 'no answer'}"
            ) from None
        kind = response.headers.get("content-type", "").split(";")[0].strip()
        return _Answer(response.status_code, kind, bytes(body), response.encoding or "utf-8")

    def _page(self, url: str, missing: str) -> tuple[dict[str, Any] | None, list[tuple[str, str]]]:
        """A simple API page: the JSON document (PEP 691) or the HTML anchors (PEP 503);
        a 404 is :class:`PackageIndexError` with the ``missing`` message."""
        answer = self._get(url, accept=_ACCEPT)
        if answer.status == 404:
            raise PackageIndexError(missing)
        kind = answer.content_type
        if kind == _JSON:
            try:
                data = json.loads(answer.body)
            except (ValueError, RecursionError):
                raise PackageIndexError(f"{redact(url)}: malformed JSON") from None
            if not isinstance(data, dict):
                raise PackageIndexError(f"{redact(url)}: not a PEP 691 simple API page")
            return data, []
        if kind in ("text/html", "application/vnd.pypi.simple.v1+html"):
            parser = _Anchors()
            parser.feed(answer.body.decode(answer.encoding, errors="replace"))
            return None, parser.anchors
        raise PackageIndexError(
            f"{redact(url)}: the index answered {kind or 'no content type'}, not a simple API page"
        )

    def projects(self) -> list[str]:
        """Every project on the index, normalized."""
        data, anchors = self._page(self.url, f"{redact(self.url)} is not a simple API index")
        if data is None:
            return sorted({canonicalize_name(text) for text, _ in anchors if text})
        entries = data.get("projects")
        if not isinstance(entries, list):
            raise PackageIndexError(f"{redact(self.url)}: a PEP 691 index page without projects")
        return sorted(
            canonicalize_name(str(entry["name"]))
            for entry in entries
            if isinstance(entry, dict) and isinstance(entry.get("name"), str)
        )

    def files(self, project: str) -> list[IndexFile]:
        """The files of ``project`` (absolute URLs, their sha256 where the index gives one);
        :class:`PackageIndexError` when the index has no such project."""
        page = urljoin(self.url, f"{canonicalize_name(project)}/")
        missing = f"the package index at {redact(self.url)} has no {project}"
        data, anchors = self._page(page, missing)
        found: list[IndexFile] = []
        if data is None:
            for text, href in anchors:
                url, fragment = urldefrag(urljoin(page, href))
                algorithm, _, value = fragment.partition("=")
                found.append(IndexFile(text, url, value if algorithm == "sha256" else None))
            return found
        entries = data.get("files")
        if not isinstance(entries, list):
            raise PackageIndexError(f"{redact(page)}: a PEP 691 project page without files")
        for entry in entries:
            if not (isinstance(entry, dict) and isinstance(entry.get("filename"), str)
                    and isinstance(entry.get("url"), str)):  # fmt: skip
                continue
            hashes = entry.get("hashes")
            sha256 = hashes.get("sha256") if isinstance(hashes, dict) else None
            found.append(IndexFile(entry["filename"], urljoin(page, entry["url"]),
                                   sha256 if isinstance(sha256, str) else None))  # fmt: skip
        return found

    def wheel(self, project: str, version: str | None = None) -> IndexFile:
        """The wheel of ``project`` at ``version`` (default: its latest version that has a
        wheel); :class:`PackageIndexError` when there is none."""
        wheels = [f for f in self.files(project) if f.wheel_version is not None]
        if version is not None:
            wanted = Version(version)
            wheels = [f for f in wheels if f.wheel_version == wanted]
        if not wheels:
            at = f" {version}" if version else ""
            raise PackageIndexError(
                f"the package index at {redact(self.url)} has no wheel of {project}{at}"
            )
        return max(wheels, key=lambda f: (f.wheel_version, f.filename))

    def download(self, file: IndexFile, folder: Path) -> Path:
        """``file`` saved in ``folder``: at most :data:`MAX_WHEEL_BYTES`, its sha256
        checked when the index gave one."""
        target = folder / Path(file.filename).name
        digest = hashlib.sha256()
        size = 0
        try:
            with self._client.stream("GET", file.url) as response, target.open("wb") as out:
                if response.status_code >= 400:
                    raise PackageIndexError(
                        f"the package index answered {response.status_code} for {file.filename}"
                    )
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > MAX_WHEEL_BYTES:
                        raise PackageIndexError(
                            f"{file.filename} is over {MAX_WHEEL_BYTES >> 20} MiB: not read"
                        )
                    digest.update(chunk)
                    out.write(chunk)
        except httpx.HTTPError as exc:
            raise PackageIndexError(f"downloading {file.filename} failed: {exc}") from None
        if file.sha256 is not None and digest.hexdigest() != file.sha256.lower():
            raise PackageIndexError(f"{file.filename}: its sha256 is not the one the index gives")
        return target

    def card(self, name: str, version: str | None = None) -> tuple[Card, IndexFile]:
        """The card of plugin ``name`` (its latest version, or ``version``), read from its
        wheel in a temporary folder, and that wheel; nothing is installed."""
        project = plugin_project(name)
        file = self.wheel(project, version)
        with tempfile.TemporaryDirectory(prefix="envhub-card-") as folder:
            card = read_card(self.download(file, Path(folder)))
        if canonicalize_name(card.distribution) != project:
            raise CardError(f"{file.filename}: its card is {card.distribution}'s, not {project}'s")
        return card, file

    def plugin_cards(self, query: str = "") -> Iterator[tuple[str, Card | PackageIndexError]]:
        """Each plugin project matching ``query`` (case-insensitive: its name, or its card's
        summary, environment or tool names) with its latest card, or the error that says
        why its card could not be read (no card, a bad one, a download that failed its
        hash); a project that is not an envhub plugin is left out. One bad project does
        not hide the others; an index that cannot list its projects raises."""
        wanted = query.lower()
        for project in self.projects():
            if not project.startswith(PLUGIN_PREFIX):
                continue
            try:
                card, _ = self.card(project)
            except PackageIndexError as exc:
                if wanted in project:
                    yield project, exc
                continue
            text = " ".join([project, card.summary] + [
                " ".join([env.name, *env.tool_names]) for env in card.environments
            ]).lower()  # fmt: skip
            if wanted in text:
                yield project, card
