"""The hub: envhub plugins shared through Python package indexes.

An envhub plugin is a distribution named ``envhub-rl-<name>`` whose wheel carries a card
(:mod:`envhub.hub.card`); any index pip installs from (PyPI, devpi, Artifactory, a
``pypiserver``) holds them, so the hub is the index the team already runs, not a service
of envhub's. One module per job: :mod:`~envhub.hub.card` (the card's format, how it is
built, written into and read from a wheel), :mod:`~envhub.hub.index` (reading an index's
simple API), :mod:`~envhub.hub.publish` (build, check, card, upload) and
:mod:`~envhub.hub.install` (pip, showing what changes first).

This module holds only the one setting and the plugins' name prefix, so that ``envhub
--help`` can name them without importing the modules that do the work.
"""

from __future__ import annotations

__all__ = ["DEFAULT_INDEX_URL", "INDEX_URL_ENV", "PLUGIN_PREFIX"]

INDEX_URL_ENV = "ENVHUB_INDEX_URL"
"""The environment variable naming the index (its simple API URL) that ``envhub publish``,
``search``, ``install`` and ``info`` use when ``--index`` is not given."""

DEFAULT_INDEX_URL = "https://pypi.org/simple/"
"""The index used when neither ``--index`` nor :data:`INDEX_URL_ENV` names one."""

PLUGIN_PREFIX = "envhub-rl-"
"""Plugin distributions are named ``envhub-rl-<name>`` (envhub.registry.CORE_DISTRIBUTION
plus a dash); an environment's name never is one, so a name with it is a distribution."""
