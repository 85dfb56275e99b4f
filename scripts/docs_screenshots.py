"""Screenshots of the built documentation site, for the docs and the release notes.

Builds the site (``mkdocs build --strict``) into a temporary folder, serves it on
127.0.0.1 with the standard library's HTTP server (mkdocs' ``use_directory_urls`` pages
need a server, not ``file://``), and has headless Chromium take PNGs of the landing page
and one tutorial page (a reference page while no tutorial is built)::

    python scripts/docs_screenshots.py            # writes docs/images/docs-*.png

Chromium is Debian's (``/usr/bin/chromium``, or ``--chromium PATH``): Playwright never
downloads a browser here, as in the web environment.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The page shown for "a tutorial", first one built wins.
TUTORIAL_PAGES = ("tutorials/first-environment/", "tutorials/serve/", "reference/cli/")


def build_site(site: Path) -> None:
    """The site as CI builds it (strict: a broken link fails here too)."""
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", DISABLE_MKDOCS_2_WARNING="true")
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                    "--site-dir", str(site)], cwd=ROOT, env=env, check=True)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """No line per request: the script prints what it saved."""


@contextmanager
def served(site: Path) -> Iterator[str]:
    """``site`` over HTTP on a free 127.0.0.1 port, for as long as the block runs."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def screenshot(pages: dict[str, str], chromium: str, width: int, height: int) -> None:
    """Each URL of ``pages`` saved as a PNG at its path, one viewport high."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium,
                                     args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            for out, url in pages.items():
                page.goto(url, wait_until="networkidle")
                page.screenshot(path=out)
                print(f"{url} -> {out}")
        finally:
            browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=800)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp)
        build_site(site)
        tutorial = next(p for p in TUTORIAL_PAGES if (site / p / "index.html").exists())
        with served(site) as base:
            screenshot({str(args.out / "docs-landing.png"): base,
                        str(args.out / "docs-tutorial.png"): base + tutorial},
                       args.chromium, args.width, args.height)


if __name__ == "__main__":
    main()
