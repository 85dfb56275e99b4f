"""Docker images that serve one environment each (``envhub image build|list|rm|run``).

:mod:`envhub.images.build` makes them (content-tagged, offline), :mod:`envhub.images.run`
starts and supervises their containers; recipes live in ``envhub/images/recipes/``.
"""

from __future__ import annotations

from envhub.images.build import (
    CONTAINER_PORT as CONTAINER_PORT,
)
from envhub.images.build import (
    build_env_image as build_env_image,
)
from envhub.images.build import (
    env_image_tag as env_image_tag,
)
from envhub.images.build import (
    plan_env_image as plan_env_image,
)

__all__ = ["CONTAINER_PORT", "build_env_image", "env_image_tag", "plan_env_image"]
