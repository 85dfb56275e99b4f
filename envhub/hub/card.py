"""The card: what an envhub plugin distribution says about itself, machine-readable.

``envhub publish`` writes it into the wheel, as ``envhub-card.json`` in the wheel's
``.dist-info`` folder (so an installed plugin keeps it: ``importlib.metadata
.distribution(name).read_text("envhub-card.json")``); ``envhub search``, ``info`` and
``install`` read it from a downloaded wheel without installing anything. The wheel is
the distribution an index serves to installers, so the card travels where the code does;
the sdist carries none.

It holds what a user decides on before installing (each environment's tools with their
schemas, task counts per split, the options a server's clients may set), what a pin
needs (distribution name and version), the result of ``envhub check`` on the built wheel
with the envhub-rl version that ran it, and the envhub-rl versions the plugin declares it
works with. ``card_schema`` is bumped on a change a reader must know about; a reader
refuses a newer schema rather than guessing, and ignores fields it does not know.

A card read from an index is untrusted: it is bounded in size (:data:`MAX_CARD_BYTES`)
and validated; whatever is wrong with it is a :class:`~envhub.errors.CardError`.

Run as ``python -m envhub.hub.card DIST_INFO OUT`` with the unpacked wheel first on
``sys.path``, it builds the card of that distribution and writes it to ``OUT``
(:func:`build_card`; a file, since a plugin may print to stdout): ``envhub publish`` does
that in a child process, so the plugin it imports is the built one and nothing of it
stays in the publishing process.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import sys
import zipfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envhub.errors import CardError

__all__ = [
    "CARD_FILE",
    "CARD_SCHEMA",
    "MAX_CARD_BYTES",
    "Card",
    "CheckResult",
    "EnvironmentCard",
    "build_card",
    "embed_card",
    "read_card",
]

CARD_FILE = "envhub-card.json"
"""The card's file name inside the wheel's ``.dist-info`` folder."""

CARD_SCHEMA = 1
"""The card format this envhub writes and the newest it reads."""

MAX_CARD_BYTES = 1 << 20
"""The largest card read from a wheel (1 MiB: a card with a hundred environments of
twenty tools each is a fraction of it)."""


class CheckResult(BaseModel):
    """``envhub check`` on every task of one environment, as run on the built wheel."""

    ok: bool
    checked: int = Field(description="tasks checked (every task of every split)")
    failing_tasks: list[str] = Field(
        default_factory=list, description="the first failing task ids (at most 20)"
    )
    tool_gaps: list[str] = Field(
        default_factory=list, description="what the tool schemas leave the model to guess"
    )


class EnvironmentCard(BaseModel):
    """One environment the distribution registers."""

    name: str = Field(description="the environment's name (its entry point)")
    version: str = Field(description="the environment class's own version")
    tools: list[dict[str, Any]] = Field(description="OpenAI function-tool JSON schemas")
    tasks: dict[str, int] = Field(description="task count per split")
    client_options: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="options a server's clients may set: name -> JSON schema with bounds",
    )
    check: CheckResult

    @property
    def tool_names(self) -> list[str]:
        return [str(tool.get("function", {}).get("name", "?")) for tool in self.tools]


class Card(BaseModel):
    """A plugin distribution's card (schema :data:`CARD_SCHEMA`)."""

    model_config = ConfigDict(extra="ignore")  # a later minor addition reads as this one

    card_schema: int
    distribution: str = Field(description="the distribution's name, e.g. envhub-rl-calc")
    version: str = Field(description="the distribution's version")
    summary: str = ""
    requires_envhub: str = Field(
        "", description="the envhub-rl versions it declares (a PEP 440 specifier; '' = any)"
    )
    checked_with: str = Field(description="the envhub-rl version that ran the check")
    environments: list[EnvironmentCard]

    @property
    def ok(self) -> bool:
        """Whether every environment passed its check."""
        return all(env.check.ok for env in self.environments)


def _card_name(names: list[str]) -> str:
    """The card's path among a wheel's ``names``: in its one ``.dist-info`` folder."""
    folders = {name.split("/", 1)[0] for name in names}
    folders = {folder for folder in folders if folder.endswith(".dist-info")}
    if len(folders) != 1:
        raise CardError(f"not a wheel: {len(folders)} .dist-info folders")
    return f"{folders.pop()}/{CARD_FILE}"


def read_card(wheel: Path) -> Card:
    """The card inside ``wheel``; :class:`CardError` when the file is not a wheel, has no
    card, or its card is larger than :data:`MAX_CARD_BYTES`, not JSON, not a card, or of a
    newer schema. Reads no more than the bound, whatever the zip's header claims."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            name = _card_name(archive.namelist())
            try:
                info = archive.getinfo(name)
            except KeyError:
                raise CardError(
                    f"{wheel.name} has no envhub card: it was not published with envhub publish"
                ) from None
            if info.file_size > MAX_CARD_BYTES:
                raise CardError(f"{wheel.name}: its card is over {MAX_CARD_BYTES} bytes")
            with archive.open(info) as member:
                raw = member.read(MAX_CARD_BYTES + 1)
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as exc:
        raise CardError(f"{wheel.name} is not a readable wheel: {exc}") from None
    if len(raw) > MAX_CARD_BYTES:
        raise CardError(f"{wheel.name}: its card is over {MAX_CARD_BYTES} bytes")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise CardError(f"{wheel.name}: its card is not JSON ({exc})") from None
    schema = data.get("card_schema") if isinstance(data, dict) else None
    if isinstance(schema, int) and schema > CARD_SCHEMA:
        raise CardError(
            f"{wheel.name}: its card has schema {schema}, newer than this envhub reads "
            f"({CARD_SCHEMA}): upgrade envhub-rl"
        )
    try:
        return Card.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the card"
        raise CardError(f"{wheel.name}: malformed card ({where}: {first['msg']})") from None


def _record_hash(data: bytes) -> str:
    """A RECORD hash (PEP 376 as wheels use it: urlsafe base64 of sha256, unpadded)."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def embed_card(wheel: Path, card: Card) -> None:
    """Rewrite ``wheel`` in place with ``card`` in its ``.dist-info`` folder, the RECORD
    listing it with its hash (installers check RECORD)."""
    text = card.model_dump_json(indent=2).encode()
    with zipfile.ZipFile(wheel) as archive:
        entries = [(info, archive.read(info)) for info in archive.infolist()]
    card_name = _card_name([info.filename for info, _ in entries])
    record_name = card_name.rsplit("/", 1)[0] + "/RECORD"
    entries = [(info, data) for info, data in entries if info.filename != card_name]
    rows: list[list[str]] = []
    rewritten = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(rewritten, "w", zipfile.ZIP_DEFLATED) as out:
        for info, data in entries:
            if info.filename == record_name:
                rows = [row for row in csv.reader(io.StringIO(data.decode())) if row]
                continue
            out.writestr(info, data)
        out.writestr(zipfile.ZipInfo(card_name, date_time=entries[0][0].date_time), text)
        rows = [row for row in rows if row[0] not in (card_name, record_name)]
        rows += [[card_name, _record_hash(text), str(len(text))], [record_name, "", ""]]
        record = io.StringIO()
        csv.writer(record, lineterminator="\n").writerows(rows)
        out.writestr(zipfile.ZipInfo(record_name, date_time=entries[0][0].date_time),
                     record.getvalue())  # fmt: skip
    rewritten.replace(wheel)


def _envhub_range(requires: list[str]) -> str:
    """The envhub-rl specifier among a distribution's requirements ('' without one)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    from envhub.registry import CORE_DISTRIBUTION

    for line in requires:
        req = Requirement(line)
        if canonicalize_name(req.name) == CORE_DISTRIBUTION and (
            req.marker is None or req.marker.evaluate({"extra": ""})
        ):
            return str(req.specifier)
    return ""


def build_card(dist_info: Path) -> Card:
    """The card of the distribution whose unpacked ``dist_info`` folder is given: every
    environment it registers is imported from there (:class:`CardError` when an installed
    copy shadows it), described, and checked on all its tasks as ``envhub check`` does.
    ``dist_info``'s folder must be first on ``sys.path``."""
    from collections import Counter
    from importlib.metadata import Distribution, version

    from envhub.clients.local import LocalEnvironment
    from envhub.registry import CORE_DISTRIBUTION, ENVIRONMENTS, discover_environments
    from envhub.rollout.check import check_tasks
    from envhub.rollout.runtime import run_async

    dist = Distribution.at(dist_info)
    name = str(dist.metadata["Name"])
    names = sorted(ep.name for ep in dist.entry_points if ep.group == ENVIRONMENTS.group)
    if not names:
        raise CardError(f"{name} registers no environment (entry points {ENVIRONMENTS.group})")
    found = discover_environments()
    environments = []
    for env in names:
        if found.get(env) is None or found[env].distribution != name:
            raise CardError(f"environment {env!r} resolves to another installed distribution")
        local = LocalEnvironment(env)
        source = Path(sys.modules[local.env_class.__module__].__file__ or "").resolve()
        if not source.is_relative_to(dist_info.parent.resolve()):
            raise CardError(f"{env}: {source} shadows the built {name} (uninstall it first)")
        ids = [task.id for task in local.tasks]
        report = run_async(check_tasks(local, ids))
        info = local.describe()
        environments.append(
            EnvironmentCard(
                name=env,
                version=info.version,
                tools=info.tools,
                tasks=dict(sorted(Counter(task.split for task in local.tasks).items())),
                client_options=info.client_options,
                check=CheckResult(
                    ok=report.ok,
                    checked=report.checked,
                    failing_tasks=report.failing_tasks[:20],
                    tool_gaps=report.tool_gaps,
                ),
            )
        )
        run_async(local.aclose())
    return Card(
        card_schema=CARD_SCHEMA,
        distribution=name,
        version=str(dist.version),
        summary=str(dist.metadata["Summary"] or ""),
        requires_envhub=_envhub_range(dist.requires or []),
        checked_with=version(CORE_DISTRIBUTION),
        environments=environments,
    )


if __name__ == "__main__":
    try:
        Path(sys.argv[2]).write_text(build_card(Path(sys.argv[1])).model_dump_json())
    except Exception as exc:  # the plugin's import or build may fail in any way
        sys.exit(f"{type(exc).__name__}: {exc}")
