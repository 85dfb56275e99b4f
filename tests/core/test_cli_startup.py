"""``envhub --help`` starts quickly: importing the CLI's entry module defines every command
without importing what the commands use (model clients, servers, trainers, browsers, the
progress bar, the plugins); each command imports those in its body."""

from __future__ import annotations

import json
import subprocess
import sys

# what some command needs, and `envhub --help` must not pay for
HEAVY = (
    "torch", "transformers", "datasets", "ray", "fastapi", "uvicorn", "starlette", "aiohttp",
    "httpx", "playwright", "openai", "litellm", "docker", "mcp", "gymnasium", "jinja2", "numpy",
    "pandas", "pyarrow", "prometheus_client", "llama_cpp", "uvloop", "orjson", "rich.progress",
    "rich.live", "envhub.server", "envhub.view", "envhub.rollout.run",
    "envhub.clients.remote", "envhub.policies.openai_compat",
)  # fmt: skip


def test_the_cli_entry_module_imports_no_heavy_module() -> None:
    code = (
        "import json, sys, envhub.cli\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "plugins = [m for m in sys.modules if m.startswith('envhub_')]\n"
        "print(json.dumps(heavy + plugins))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
