"""``envhub publish``: build a plugin, check what was built, card it, upload it.

The order is what makes a published plugin trustworthy: the sdist and wheel are built
with ``build`` from a clean copy of the plugin (the user's tree is left as it was), the
wheel is unpacked and checked as ``envhub check`` does, every task, in a child process
that imports the plugin from there (so the check runs the code that is uploaded, with
its package data), the card (:mod:`envhub.hub.card`) records the result inside the
wheel, and only then does ``twine`` upload both files. A plugin that fails to build or
to pass its check is refused with :class:`~envhub.errors.PublishRefused` and nothing is
uploaded.

Credentials are twine's business, taken the way twine takes them (``TWINE_USERNAME`` /
``TWINE_PASSWORD``, ``.pypirc``, keyring); envhub never reads or prints them, and runs
twine non-interactively so that a missing credential fails instead of waiting on a
prompt nobody sees.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from envhub._util.clean_copy import clean_copy
from envhub.errors import InvalidRequest, PublishRefused
from envhub.hub.card import Card, embed_card
from envhub.hub.index import redact

__all__ = ["Published", "publish", "upload_url_for"]

_UPLOAD_URLS = {
    "https://pypi.org/simple/": "https://upload.pypi.org/legacy/",
    "https://test.pypi.org/simple/": "https://test.pypi.org/legacy/",
}


def upload_url_for(index_url: str) -> str:
    """Where to upload for the simple API at ``index_url``: PyPI's and TestPyPI's upload
    endpoints, else the index's root for ``.../simple/`` (pypiserver) and ``.../+simple/``
    (devpi). Any other index needs ``--upload-url`` (or twine's ``--repository``)."""
    if index_url in _UPLOAD_URLS:
        return _UPLOAD_URLS[index_url]
    for suffix in ("/+simple/", "/simple/"):
        if index_url.endswith(suffix):
            return index_url.removesuffix(suffix) + "/"
    raise InvalidRequest(f"cannot tell where {redact(index_url)} takes uploads: pass --upload-url")


@dataclass(frozen=True)
class Published:
    """What ``publish`` built and uploaded."""

    card: Card
    files: list[str]  # the file names of the sdist and the wheel
    uploaded_to: str  # the (redacted) upload URL, or twine's repository name


Step = Callable[[str], None]


def _run(
    command: list[str], what: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> str:
    """Run ``command``; its output, or :class:`PublishRefused` with its last lines."""
    proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd)
    if proc.returncode != 0:
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        tail = " | ".join(line.strip() for line in lines[-3:] if line.strip())
        raise PublishRefused(f"{what} failed: {tail or f'exit {proc.returncode}'}")
    return proc.stdout


def _build(source: Path, out: Path) -> list[Path]:
    """The sdist and the wheel (built from the sdist) of ``source`` in ``out``: with this
    environment's build backend when it has what the plugin's build-system requires,
    else in build's isolated environment (which installs them)."""
    import build

    try:
        requires = build.ProjectBuilder(source).build_system_requires
    except build.BuildException as exc:
        raise PublishRefused(f"{source.name} is not a buildable project: {exc}") from None
    missing = any(next(build.check_dependency(req), None) for req in requires)
    isolation = [] if missing else ["--no-isolation"]
    _run([sys.executable, "-m", "build", *isolation, "--outdir", str(out), str(source)], "build")
    return sorted(out.iterdir())


def _card_of(wheel: Path, work: Path) -> Card:
    """The card of ``wheel``: unpacked in ``work``, checked in a child process that
    imports the plugin from there (:func:`envhub.hub.card.build_card`)."""
    site = work / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)  # our own wheel, just built
    dist_info = next(site.glob("*.dist-info"))
    out = work / "card.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    )}  # fmt: skip
    env.pop("ENVHUB_BLOCK_PLUGINS", None)
    # in ``work``: ``python -m`` puts the working directory first on sys.path, and the
    # user's may hold the plugin's source package, which would shadow the built one
    _run([sys.executable, "-m", "envhub.hub.card", str(dist_info), str(out)],
         f"checking {wheel.name}", env, cwd=work)  # fmt: skip
    return Card.model_validate_json(out.read_text())


def publish(
    path: Path,
    *,
    upload_url: str | None,
    repository: str | None = None,
    step: Step = lambda message: None,
) -> Published:
    """Build, check, card and upload the plugin at ``path``: to ``upload_url``, or to
    twine's ``repository`` (a ``.pypirc`` section), or where twine's own settings say
    when both are ``None``. ``step`` is told what is being done. :class:`PublishRefused`
    (nothing uploaded) when it does not build, its check fails or twine fails."""
    if not (path / "pyproject.toml").is_file():
        raise InvalidRequest(f"{path} is not a plugin project: it has no pyproject.toml")
    if not all(importlib.util.find_spec(tool) for tool in ("build", "twine")):
        raise InvalidRequest(
            "envhub publish needs build and twine: pip install 'envhub-rl[publish]'"
        )
    with tempfile.TemporaryDirectory(prefix="envhub-publish-") as folder:
        work = Path(folder)
        step(f"building {path}")
        files = _build(clean_copy(path, work / "source"), work / "dist")
        wheels = [f for f in files if f.suffix == ".whl"]
        if len(wheels) != 1:
            raise PublishRefused(f"the build made {len(wheels)} wheels, not one")
        step(f"checking {wheels[0].name}")
        card = _card_of(wheels[0], work)
        if not card.ok:
            failing = [f"{env.name}: {', '.join(env.check.failing_tasks[:5])}"
                       for env in card.environments if not env.check.ok]  # fmt: skip
            raise PublishRefused(
                f"envhub check failed on {'; '.join(failing)}; nothing was uploaded"
            )
        embed_card(wheels[0], card)
        where = (["--repository-url", upload_url] if upload_url
                 else ["--repository", repository] if repository else [])  # fmt: skip
        target = redact(upload_url) if upload_url else repository or "twine's default"
        step(f"uploading {', '.join(f.name for f in files)} to {target}")
        _run([sys.executable, "-m", "twine", "upload", "--non-interactive",
              "--disable-progress-bar", *where, *map(str, files)], "twine upload",
             {**os.environ, "NO_COLOR": "1"})  # fmt: skip
        return Published(card, [f.name for f in files], target)
