"""The MiniShop catalog is built once per process however many sessions want it first at
once. It is an in-memory artefact (about 0.3 s of CPU to build), so each process builds
its own: there is nothing on disk to share or to race on."""

from __future__ import annotations

from envhub_web.catalog import Catalog, load_catalog

from envhub.testing import first_uses_at_once


def test_concurrent_first_uses_share_one_catalog() -> None:
    seed = 7331  # a catalog no other test loads, so this process has not built it yet
    got: list[Catalog] = []
    first_uses_at_once(lambda: got.append(load_catalog(seed, 3000)), "", threads=6, processes=0)
    assert len(got) == 6
    assert len({id(catalog) for catalog in got}) == 1, "the catalog was built more than once"
    assert load_catalog(seed, 3000) is got[0]
