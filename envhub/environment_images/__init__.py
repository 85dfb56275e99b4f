"""Docker images that serve one environment each (``envhub image build|list|rm|run``).

:mod:`.build` makes them (content-tagged, offline), :mod:`.run` starts and supervises
their containers; recipes live in ``envhub/environment_images/recipes/``.
"""

from __future__ import annotations

from envhub.environment_images.build import (
    CONTAINER_PORT as CONTAINER_PORT,
)
from envhub.environment_images.build import (
    build_env_image as build_env_image,
)
from envhub.environment_images.build import (
    env_image_tag as env_image_tag,
)
from envhub.environment_images.build import (
    plan_env_image as plan_env_image,
)

__all__ = ["CONTAINER_PORT", "build_env_image", "env_image_tag", "plan_env_image"]
