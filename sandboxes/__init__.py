"""Sandboxes: isolated places where an episode's commands run.

``open_sandbox(spec, backend)`` is the one entry point; environments describe what they
need with a ``SandboxSpec`` and the backend comes from configuration
(``resolve_backend``), so the same environment runs on a laptop and in a cluster::

    async with open_sandbox(SandboxSpec(image="python"), backend="docker") as sb:
        result = await sb.exec("python3 -c 'print(1)'", timeout=10)

Backends: ``local`` (no isolation; the default), ``bwrap`` (Linux namespaces),
``docker`` (containers; needs ``pip install envhub-rl[docker]``), and any a plugin registers
in the ``envhub.sandboxes`` entry-point group (``backend_names()`` lists them).
``SandboxPool`` keeps sandboxes pre-started so an episode gets one in milliseconds.
``bwrap_problem()`` says why bwrap cannot run on this host (``None``: it can), for code
that confines its own children with it where it works. ``configure_admission`` (or
``ENVHUB_SANDBOX_ADMISSION``) caps how many sandboxes start at once and how fast
(:mod:`envhub.sandboxes.admission`).
"""

from __future__ import annotations

from envhub.sandboxes._select import (
    SANDBOXES as SANDBOXES,
)
from envhub.sandboxes._select import (
    backend_names as backend_names,
)
from envhub.sandboxes._select import (
    make_sandbox as make_sandbox,
)
from envhub.sandboxes._select import (
    open_sandbox as open_sandbox,
)
from envhub.sandboxes._select import (
    resolve_backend as resolve_backend,
)
from envhub.sandboxes.admission import AdmissionLimits as AdmissionLimits
from envhub.sandboxes.admission import AdmissionStats as AdmissionStats
from envhub.sandboxes.admission import admission_limits as admission_limits
from envhub.sandboxes.admission import admission_stats as admission_stats
from envhub.sandboxes.admission import configure_admission as configure_admission
from envhub.sandboxes.admission import parse_admission as parse_admission
from envhub.sandboxes.base import ExecResult as ExecResult
from envhub.sandboxes.base import Sandbox as Sandbox
from envhub.sandboxes.base import SandboxSpec as SandboxSpec
from envhub.sandboxes.bwrap import bwrap_problem as bwrap_problem
from envhub.sandboxes.pool import PoolMetrics as PoolMetrics
from envhub.sandboxes.pool import SandboxPool as SandboxPool

__all__ = [
    "SANDBOXES",
    "AdmissionLimits",
    "AdmissionStats",
    "ExecResult",
    "PoolMetrics",
    "Sandbox",
    "SandboxPool",
    "SandboxSpec",
    "admission_limits",
    "admission_stats",
    "backend_names",
    "bwrap_problem",
    "configure_admission",
    "make_sandbox",
    "open_sandbox",
    "parse_admission",
    "resolve_backend",
]
