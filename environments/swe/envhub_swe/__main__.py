"""``python -m envhub_swe build [--repos a,b]``: prepare the catalog's repositories and
build their sandbox images (idempotent, cached by content hash).

``python -m envhub_swe generate ...`` regenerates the shipped tasks (see
:mod:`envhub_swe.generate`).
"""

from __future__ import annotations

import argparse
import sys
import time


def _build(argv: list[str]) -> int:
    from envhub_swe.build import base_commit, prepare_repo
    from envhub_swe.catalog import load_catalog
    from envhub_swe.images import build_image

    parser = argparse.ArgumentParser(prog="python -m envhub_swe build")
    parser.add_argument("--repos", default=None, help="comma-separated names (default: all)")
    parser.add_argument("--no-image", action="store_true", help="repositories only (local backend)")
    parser.add_argument("--force", action="store_true", help="rebuild images that exist")
    args = parser.parse_args(argv)
    catalog = load_catalog()
    names = args.repos.split(",") if args.repos else [r.name for r in catalog.repos]
    for name in names:
        repo = catalog.get(name)
        started = time.monotonic()
        prepare_repo(repo)
        tag = "-" if args.no_image else build_image(repo, force=args.force)
        print(
            f"{repo.key}: base {base_commit(repo)[:12]} image {tag} "
            f"({time.monotonic() - started:.1f}s)",
            flush=True,
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("build", "generate"):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "build":
        return _build(argv[1:])
    from envhub_swe.generate import main as generate

    return generate(argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
