"""``envhub init``: create a new environment plugin from a template.

Two templates: ``minimal`` (the default: one tool, one reward, a task file, names derived
from the new one) and ``calc`` (a renamed copy of the installed ``envhub_calc`` starter:
a fuller example, with seeded task generation and a rubric). The templates' files are
``envhub/cli/templates/**.tmpl``, filled in with :class:`string.Template` (``$name``,
``$cls``, ...), so they read as the code they become.

A name that an installed plugin registers, or that is an importable module, is refused:
the new plugin's environment or package would shadow the other, or be shadowed by it.
"""

from __future__ import annotations

import importlib.util
import re
from importlib import resources
from pathlib import Path
from string import Template

from envhub.errors import InvalidRequest

__all__ = ["TEMPLATES", "scaffold_plugin"]

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

TEMPLATES = ("minimal", "calc")

_EDIT = {
    "minimal": "Edit `envhub_$name/env.py` (tools and reward) and `envhub_$name/tasks.jsonl` "
    "(tasks, each with the gold actions `envhub check` replays).",
    "calc": "Edit `envhub_$name/env.py` (tools and reward) and `envhub_$name/problems.py` (tasks).",
}


def _refuse_taken(name: str) -> None:
    """Refuse ``name`` when it would shadow, or be shadowed by, something installed."""
    from envhub.registry import ENVIRONMENTS, plugin_names

    if not _NAME.match(name):
        raise InvalidRequest(
            f"invalid environment name {name!r}: use lower-case letters, digits, _"
        )
    if name in plugin_names(ENVIRONMENTS):
        raise InvalidRequest(
            f"environment name {name!r} is taken by an installed plugin (see envhub list); "
            "pick another name"
        )
    for module in (name, f"envhub_{name}"):
        if importlib.util.find_spec(module) is not None:
            raise InvalidRequest(
                f"environment name {name!r} would shadow the importable module {module!r}; "
                "pick another name"
            )


def _calc_sources(name: str, cls: str) -> dict[str, str]:
    """The installed calc starter's modules, renamed to ``name``/``cls``."""
    try:
        starter = resources.files("envhub_calc")
    except ModuleNotFoundError:
        raise InvalidRequest(
            "the calc template is the installed calc plugin: pip install envhub-rl-calc"
        ) from None

    def rename(source: str) -> str:
        source = source.replace("envhub_calc", f"envhub_{name}").replace("CalcEnv", cls)
        source = source.replace('name = "calc"', f'name = "{name}"')
        source = source.replace('id=f"calc-', f'id=f"{name}-')
        source = source.replace("envhub-rl-calc", f"envhub-rl-{name.replace('_', '-')}")
        return source.replace("The ``calc``", f"The ``{name}``")

    return {
        entry.name: rename(entry.read_text("utf-8"))
        for entry in starter.iterdir()
        if entry.name.endswith(".py")
    }


def scaffold_plugin(name: str, target: Path, template: str = "minimal") -> Path:
    """Write a new plugin package for ``name`` into ``target`` from ``template``; returns
    the directory. :class:`InvalidRequest` for a bad or taken name, an unknown template,
    or a ``target`` that holds files."""
    _refuse_taken(name)
    if template not in TEMPLATES:
        raise InvalidRequest(f"unknown template {template!r}; choose one of {', '.join(TEMPLATES)}")
    if target.exists() and any(target.iterdir()):
        raise InvalidRequest(f"{target} already exists and is not empty")
    cls = "".join(part.capitalize() for part in name.split("_")) + "Env"
    fields = {
        "name": name,
        "cls": cls,
        "template": template,
        "distribution": f"envhub-rl-{name.replace('_', '-')}",
    }
    fields["edit"] = Template(_EDIT[template]).substitute(fields)
    templates = resources.files("envhub.cli") / "templates"

    def fill(path: str) -> str:
        return Template((templates / path).read_text("utf-8")).substitute(fields)

    if template == "calc":
        package_files = _calc_sources(name, cls)
    else:
        package_files = {
            entry.name.removesuffix(".tmpl"): fill(f"{template}/{entry.name}")
            for entry in (templates / template).iterdir()
            if entry.name.endswith(".tmpl")
        }
    package = target / f"envhub_{name}"
    package.mkdir(parents=True)
    for filename, text in package_files.items():
        (package / filename).write_text(text, "utf-8")
    (target / "tests").mkdir()
    (target / "tests" / f"test_{name}.py").write_text(fill("test_plugin.py.tmpl"), "utf-8")
    (target / "pyproject.toml").write_text(fill("pyproject.toml.tmpl"), "utf-8")
    (target / "README.md").write_text(fill("README.md.tmpl"), "utf-8")
    return target
