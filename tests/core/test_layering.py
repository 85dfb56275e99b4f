"""The import layering holds: ``.ci/layering.sh`` (a stage of its own in CI) runs
import-linter over the contracts in pyproject.toml's ``[tool.importlinter]``, which
docs/architecture.md draws, and passes. The same contracts with their layers turned upside
down fail and name imports that exist, one of them in ``server/`` (envhub.server), so a
pass means the checker saw the whole installed package, not an empty or partial graph.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "layering.sh"


def _lint(config: Path | None = None) -> subprocess.CompletedProcess[str]:
    args = ["bash", str(SCRIPT), *([str(config)] if config else [])]
    return subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)


def _toml_table(header: str, values: dict[str, Any]) -> str:
    """A TOML table of strings, booleans and lists of strings (JSON writes them as TOML
    reads them)."""
    lines = "".join(f"{key} = {json.dumps(value)}\n" for key, value in values.items())
    return f"{header}\n{lines}"


def test_the_layering_holds() -> None:
    result = _lint()
    assert result.returncode == 0, result.stdout + result.stderr
    assert " 0 broken" in result.stdout, result.stdout


def test_the_layers_upside_down_fail_naming_real_imports(tmp_path: Path) -> None:
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["importlinter"]
    contracts = settings.pop("contracts")
    layers = next(contract for contract in contracts if contract["type"] == "layers")
    layers["layers"] = layers["layers"][::-1]
    layers.pop("ignore_imports", None)
    config = tmp_path / "upside_down.toml"
    config.write_text(
        _toml_table("[tool.importlinter]", settings)
        + _toml_table("[[tool.importlinter.contracts]]", layers),
        "utf-8",
    )

    result = _lint(config)

    assert result.returncode == 1, result.stdout + result.stderr
    assert "BROKEN" in result.stdout
    for real_import in ("envhub.clients.local -> envhub.runtime.session",
                        "envhub.server.mcp -> envhub.mcp.http"):
        assert real_import in result.stdout, result.stdout
