"""The documentation site's reference pages, generated from the code on every build.

``mkdocs build`` runs this through the ``gen-files`` plugin (mkdocs.yml), so the pages
cannot drift from the code they describe: the CLI is walked from the typer app, the
HTTP API rendered from the server's own ``openapi.json``, the trajectory schema from the
pydantic models, the error codes from ``envhub.errors`` and the server's status map, and
the environment options from each installed plugin's constructor; the changelog
is CHANGELOG.md with its links made relative to the site. Nothing here is
hand-copied; a new command, route, field, error class or option shows up by itself.

Run directly (``python scripts/docs_reference.py OUT``) it writes the pages to ``OUT``.
"""

from __future__ import annotations

import inspect
import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envhub.errors import EnvhubError

__all__ = ["PAGES", "changelog_page", "cli_page", "environment_options_page", "errors_page",
           "http_api_page", "trajectory_page"]

_GENERATED = (
    "<!-- Generated on every docs build by scripts/docs_reference.py; edit the code, "
    "not this page. -->\n\n"
)


def _cell(text: object) -> str:
    """``text`` safe inside a Markdown table cell (one line, no bare pipes), with the
    reStructuredText ````literals```` of docstrings as Markdown code."""
    return " ".join(str(text).split()).replace("``", "`").replace("|", "\\|")


def _prose(docstring: str) -> str:
    """A docstring's text as Markdown: dedented, ````literals```` as code."""
    return inspect.cleandoc(docstring).replace("``", "`")


def _code(text: object) -> str:
    """``text`` as inline code inside a table cell (backticks and pipes survive)."""
    shown = _cell(text)
    return f"`` {shown} ``" if "`" in shown else f"`{shown}`"


# --- the CLI -------------------------------------------------------------------------


def _commands(cmd: Any, ctx: Any) -> Iterator[tuple[Any, Any]]:
    """``cmd`` and every command below it, depth first, in the order ``--help`` lists.
    (Typer carries its own copy of click, so commands and contexts are typed ``Any`` and
    groups are known by ``list_commands``.)"""
    yield cmd, ctx
    for name in cmd.list_commands(ctx) if hasattr(cmd, "list_commands") else ():
        sub = cmd.get_command(ctx, name)
        if sub is not None and not sub.hidden:
            yield from _commands(sub, sub.context_class(sub, info_name=name, parent=ctx))


def cli_page() -> str:
    """Every ``envhub`` command with its usage, help and options, as ``--help`` has them."""
    import typer

    from envhub.cli import app

    root = typer.main.get_command(app)
    out = [_GENERATED, "# Command line\n\n",
           "Every command and option of `envhub`, taken from the CLI itself (`envhub COMMAND "
           "--help` prints the same). Options that take an environment accept repeated "
           "`--env-arg KEY=VALUE`; see the [environment options](environment-options.md).\n"]
    for cmd, ctx in _commands(root, root.context_class(root, info_name="envhub")):
        path = ctx.command_path
        level = "#" * min(2 + path.count(" "), 4)
        out.append(f"\n{level} `{path}`\n\n")
        out.append(f"```text\n{path} {' '.join(cmd.collect_usage_pieces(ctx))}\n```\n\n")
        if cmd.help:
            out.append(_prose(cmd.help).replace("\b\n", "") + "\n\n")
        if hasattr(cmd, "list_commands"):
            subs = [(n, cmd.get_command(ctx, n)) for n in cmd.list_commands(ctx)]
            out.append("| command | what it does |\n|---|---|\n")
            for name, sub in subs:
                if sub is not None and not sub.hidden:
                    out.append(f"| `{path} {name}` | {_cell(sub.get_short_help_str(200))} |\n")
            out.append("\n")
        rows = [(p, p.get_help_record(ctx)) for p in cmd.get_params(ctx)]
        rows = [(p, rec) for p, rec in rows if rec is not None]
        if rows:
            out.append("| argument or option | description |\n|---|---|\n")
            for _, (names, text) in rows:
                out.append(f"| {_code(names)} | {_cell(text)} |\n")
    return "".join(out)


# --- the HTTP API --------------------------------------------------------------------


def _schema_type(schema: dict[str, Any]) -> str:
    """A JSON schema's type in a few words, with ``$ref``s as links to their section."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(_schema_type(s) for s in schema[key])
    if "allOf" in schema:
        return " and ".join(_schema_type(s) for s in schema["allOf"])
    kind = schema.get("type")
    if kind == "array":
        return f"list of {_schema_type(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {_schema_type(schema['additionalProperties'])}"
    if "enum" in schema:
        return " | ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    return str(kind or "any")


def _model_table(name: str, schema: dict[str, Any], level: str) -> str:
    """One model's fields (name, type, required, default, description) as a table."""
    out = [f"{level} {name}\n\n"]
    if schema.get("description"):
        out.append(_prose(schema["description"]) + "\n\n")
    props = schema.get("properties", {})
    if not props:
        out.append(f"Type: {_schema_type(schema)}.\n\n")
        return "".join(out)
    required = set(schema.get("required", ()))
    out.append("| field | type | required | default | description |\n|---|---|---|---|---|\n")
    for field, prop in props.items():
        default = _code(json.dumps(prop["default"])) if "default" in prop else ""
        out.append(f"| `{field}` | {_cell(_schema_type(prop))} | "
                   f"{'yes' if field in required else ''} | {default} | "
                   f"{_cell(prop.get('description', ''))} |\n")
    return "".join(out) + "\n"


def _openapi() -> dict[str, Any]:
    """The OpenAPI document ``envhub serve`` publishes at ``/openapi.json`` (the routes
    and models do not depend on the hosted environments)."""
    from envhub.server.app import build_app

    spec: dict[str, Any] = build_app([]).openapi()
    return spec


def http_api_page() -> str:
    """Every route of the server with its parameters, body, answers and models."""
    spec = _openapi()
    out = [_GENERATED, "# HTTP API\n\n",
           f"The routes of `envhub serve` (API version {spec['info']['version']}), rendered "
           "from the server's own OpenAPI document, which a running server also serves at "
           "`GET /openapi.json` ([download this build's copy](openapi.json)). The WebSocket "
           "doors (`WS /v1/ws`, `WS /v1/sessions/{id}/ws`) carry the same bodies as these "
           "routes, and the MCP door serves the same sessions: see [Serving](../serving.md). "
           "Every error answer is an [ErrorBody](#errorbody); its codes and statuses are "
           "listed in [Error codes](errors.md).\n\n## Routes\n"]
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            out.append(f"\n### `{method.upper()} {path}`\n\n")
            out.append(f"{op.get('summary', '')}. {_prose(op.get('description', ''))}"
                       .strip() + "\n\n")
            params = op.get("parameters", [])
            if params:
                out.append("| parameter | in | type | required | description |\n"
                           "|---|---|---|---|---|\n")
                for p in params:
                    out.append(f"| `{p['name']}` | {p['in']} | "
                               f"{_cell(_schema_type(p.get('schema', {})))} | "
                               f"{'yes' if p.get('required') else ''} | "
                               f"{_cell(p.get('description', ''))} |\n")
                out.append("\n")
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                out.append(f"Request body: {_schema_type(body['schema'])}.\n\n")
            out.append("| status | meaning | body |\n|---|---|---|\n")
            for status, answer in op.get("responses", {}).items():
                content: dict[str, Any] = answer.get("content", {})
                media: dict[str, Any] = next(iter(content.values()), {})
                schema = media.get("schema")
                shown = _schema_type(schema) if schema else ""
                out.append(f"| {status} | {_cell(answer.get('description', ''))} | "
                           f"{_cell(shown)} |\n")
    out.append("\n## Models\n\n")
    for name, schema in spec.get("components", {}).get("schemas", {}).items():
        out.append(_model_table(name, schema, "###"))
    return "".join(out)


# --- trajectories --------------------------------------------------------------------


def trajectory_page() -> str:
    """The trajectory record (one JSON line per episode) from its pydantic models."""
    from envhub.trajectory import SCHEMA_VERSION, Trajectory

    schema = Trajectory.model_json_schema()
    defs = schema.pop("$defs", {})
    out = [_GENERATED, "# Trajectory schema\n\n",
           f"One JSON line per episode, `schema_version` {SCHEMA_VERSION}, as the pydantic "
           "models of `envhub.trajectory` define it (what each field means in practice: "
           "[Rollouts](../rollouts.md#trajectory-format-schema_version-1); reading and "
           "writing: [`envhub.trajectory`](python-api.md#envhub.trajectory)).\n\n"]
    out.append(_model_table("Trajectory", schema, "##"))
    for name, sub in defs.items():
        out.append(_model_table(name, sub, "##"))
    full = dict(schema, **({"$defs": defs} if defs else {}))
    out.append("## JSON schema\n\n```json\n" + json.dumps(full, indent=2) + "\n```\n")
    return "".join(out)


# --- error codes ---------------------------------------------------------------------


def _subclasses(cls: type[EnvhubError]) -> Iterator[tuple[int, type[EnvhubError]]]:
    """``cls`` and its subclasses in tree order, with their depth below ``cls``."""
    stack: list[tuple[int, type[EnvhubError]]] = [(0, cls)]
    while stack:
        depth, current = stack.pop()
        yield depth, current
        stack.extend((depth + 1, sub) for sub in reversed(current.__subclasses__())
                     if sub.__module__ == cls.__module__)


_TREE_ROW = re.compile(r"[│├└─\s]*(?P<name>[A-Z]\w+)\s+(?P<meaning>.*?)(?:\s+\(\w+\))?\s*$")


def _tree_meanings(doc: str) -> dict[str, str]:
    """The one-line meaning each class has in the tree drawn in ``envhub.errors``'
    docstring (``├── Name   meaning   (code)``)."""
    rows = (_TREE_ROW.match(line) for line in doc.splitlines() if "── " in line)
    return {m["name"]: m["meaning"] for m in rows if m}


def errors_page() -> str:
    """Each error class of ``envhub.errors``: its code, HTTP status and meaning."""
    from envhub import errors
    from envhub.server.errors import STATUS_BY_CODE, VALIDATION_STATUS

    meanings = _tree_meanings(errors.__doc__ or "")
    out = [_GENERATED, "# Error codes\n\n",
           "Every failure that crosses a module boundary is an `envhub.errors.EnvhubError`. "
           "Servers answer it as `{\"error\": {\"code\", \"message\"}}` with the status below "
           "(unlisted codes answer 500), on HTTP, WebSocket (`\"status\"` beside the error) "
           "and MCP (`data.code`); clients turn the code back into the class "
           "(`envhub.errors.error_class`). Tool errors never reach a client as errors: the "
           "session turns them into `is_error` observations the model reads.\n\n",
           "| class | code | HTTP status | meaning |\n|---|---|---|---|\n"]
    for depth, cls in _subclasses(errors.EnvhubError):
        code = cls.code
        doc = inspect.getdoc(cls) if cls.__doc__ else ""
        meaning = meanings.get(cls.__name__) or (doc or "").split("\n\n")[0]
        indent = "&nbsp;&nbsp;" * 2 * depth
        out.append(f"| {indent}`{cls.__name__}` | `{code}` | "
                   f"{STATUS_BY_CODE.get(code, 500)} | {_cell(meaning)} |\n")
    server_only = sorted(set(STATUS_BY_CODE) - {c.code for _, c in
                                                 _subclasses(errors.EnvhubError)})
    out.append("\nCodes the server answers without a class (routing and transport): "
               + ", ".join(f"`{c}` {STATUS_BY_CODE[c]}" for c in server_only)
               + f". A body that fails its schema is `invalid_request` {VALIDATION_STATUS}; "
               "refused options are `invalid_request` 400.\n")
    return "".join(out)


# --- environment options -------------------------------------------------------------


def _annotation(param: inspect.Parameter) -> str:
    if param.annotation is inspect.Parameter.empty:
        return ""
    kind = param.annotation
    return kind if isinstance(kind, str) else inspect.formatannotation(kind)


def environment_options_page() -> str:
    """Each installed plugin's constructor options (``--env-arg``), with their type,
    default and whether a server's clients may set them."""
    from envhub.environment import option_names
    from envhub.registry import discover_environments, load_environment_class
    from envhub.runtime.client_options import client_option_schemas

    specs = discover_environments()
    out = [_GENERATED, "# Environment options\n\n",
           "The options each installed environment's constructor takes, read from the "
           "plugin itself: the operator sets any of them with `--env-arg KEY=VALUE` (or "
           "`envhub.make(name, **options)`); an HTTP or WebSocket client may set only those "
           "marked client-settable, within the bounds shown ([Security](../security.md)). "
           "This build had these plugins installed: "
           + ", ".join(f"`{n}`" for n in sorted(specs)) + ".\n"]
    for name in sorted(specs):
        spec = specs[name]
        out.append(f"\n## `{name}`\n\n")
        dist = f"distribution `{spec.distribution}` {spec.version}, " if spec.distribution else ""
        try:
            cls = load_environment_class(name)
        except Exception as exc:  # a broken plugin is reported in its section, as envhub list does
            out.append(f"{dist}could not be imported: `{type(exc).__name__}: {_cell(exc)}`\n")
            continue
        out.append(f"{dist}class `{cls.__module__}.{cls.__qualname__}`.\n\n")
        summary = (inspect.getdoc(cls) or "").split("\n\n")[0]
        if summary:
            out.append(" ".join(_prose(summary).split()) + "\n\n")
        params = inspect.signature(cls.__init__).parameters
        names = option_names(cls)
        if not names:
            out.append("No options.\n")
            continue
        client = client_option_schemas(cls)
        out.append("| option | type | default | client-settable |\n|---|---|---|---|\n")
        for option in names:
            param = params[option]
            default = "" if param.default is inspect.Parameter.empty else _code(
                repr(param.default))
            settable = _code(json.dumps(client[option])) if option in client else ""
            out.append(f"| `{option}` | {_code(_annotation(param)) if _annotation(param) else ''}"
                       f" | {default or 'required'} | {settable} |\n")
    return "".join(out)


# --- the changelog -------------------------------------------------------------------


def changelog_page() -> str:
    """CHANGELOG.md (kept at the repository root, where packagers look for it) with its
    links into ``docs/`` made relative to the site."""
    text = (Path(__file__).resolve().parents[1] / "CHANGELOG.md").read_text("utf-8")
    return _GENERATED + text.replace("](docs/", "](")


PAGES: dict[str, Callable[[], str]] = {
    "reference/cli.md": cli_page,
    "reference/http-api.md": http_api_page,
    "reference/trajectory.md": trajectory_page,
    "reference/errors.md": errors_page,
    "reference/environment-options.md": environment_options_page,
    "changelog.md": changelog_page,
}
"""Each generated page's path under ``docs/`` and the function that writes it."""


def _write_with_gen_files() -> None:
    """mkdocs-gen-files' entry: the pages, plus the raw ``openapi.json`` they link to."""
    import mkdocs_gen_files

    for path, render in PAGES.items():
        with mkdocs_gen_files.open(path, "w") as fh:
            fh.write(render())
    with mkdocs_gen_files.open("reference/openapi.json", "w") as fh:
        json.dump(_openapi(), fh, indent=2)


if __name__ == "__main__":  # by hand
    if len(sys.argv) == 2:
        target = Path(sys.argv[1])
        for rel, render in PAGES.items():
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            (target / rel).write_text(render(), "utf-8")
    else:
        sys.exit("usage: python scripts/docs_reference.py OUT_DIR")
elif __name__ == "<run_path>":  # mkdocs-gen-files runs the file with runpy.run_path
    _write_with_gen_files()
