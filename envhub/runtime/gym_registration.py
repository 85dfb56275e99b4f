"""gymnasium ids ``envhub/NAME-v0`` for every installed plugin, registered lazily.

This is also gymnasium's plugin hook (entry-point group ``gymnasium.envs``, name
``envhub``): gymnasium 0.26-0.29 call :func:`register_envs` while ``import gymnasium``
runs, so ``gymnasium.make("envhub/calc-v0")`` needs no other import. At that moment
gymnasium's top level is half initialised, so this module imports nothing of gymnasium
but its registration module, and no environment: it reads entry-point metadata and
registers the adapter by its ``"module:Class"`` string, which ``gymnasium.make`` imports
on demand. gymnasium 1.0 dropped plugin loading; there ``import envhub.gym`` or the
module-prefixed id ``"envhub.gym:envhub/calc-v0"`` registers the ids.
"""

from __future__ import annotations

__all__ = ["ADAPTER", "register_envs"]

ADAPTER = "envhub.gym:EnvhubGymEnv"


def register_envs() -> list[str]:
    """Register ``envhub/NAME-v0`` for every installed plugin (once); returns the ids."""
    from gymnasium.envs.registration import register, registry

    from envhub.registry import discover_environments

    ids = []
    for name in discover_environments():
        env_id = f"envhub/{name}-v0"
        if env_id not in registry:
            register(id=env_id, entry_point=ADAPTER, kwargs={"env": name})
        ids.append(env_id)
    return ids
