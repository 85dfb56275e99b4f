#!/usr/bin/env bash
# Prepare a fresh Debian bookworm CI machine (run as root) for the web environment tests.
#
# Idempotent: installs Debian's Chromium only if no Chromium is on PATH, and the
# envhub-rl-web plugin (with Playwright and miniwob) only if it does not import.
# Playwright drives the Debian binary (`executable_path`); `playwright install` is never
# run, since browser downloads are not reachable here.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$REPO/.venv/bin/python}"

if ! command -v chromium >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # fonts-liberation: readable screenshots; chromium pulls in the rest of its libraries
  apt-get install -y -qq --no-install-recommends chromium fonts-liberation
fi
echo "chromium: $(chromium --version 2>/dev/null | head -n 1)"

if ! "$PY" -c 'import envhub_web, playwright, miniwob' 2>/dev/null; then
  "$PY" -m pip install -q -e "$REPO/environments/web[miniwob]"
fi

# Smoke test: Playwright can launch the Debian Chromium headless and shut it down.
"$PY" - <<'PY'
import asyncio

from envhub_web.pool import find_chromium, launch_browser


async def main() -> None:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await launch_browser(playwright, find_chromium())
        print("playwright + chromium", browser.version, "ok")
        await browser.close()


asyncio.run(main())
PY
