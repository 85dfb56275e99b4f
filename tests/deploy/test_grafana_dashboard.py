"""``deploy/grafana/envhub-dashboard.json``: a Grafana dashboard whose every query names
series that exist, by the names and labels the real registries expose (issue 18).

The known series are read from the registry of a real
:class:`~envhub.rollout.metrics.RolloutMetrics` fed through its hooks and from a real env
server's after a short episode over HTTP, so a renamed metric or label breaks this test,
not the dashboard in someone's Grafana.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from envhub.policies.base import Completion
from envhub.rollout.metrics import RolloutMetrics
from envhub.testing import serve_in_thread
from envhub.trajectory import ErrorInfo, TrajectoryMetrics
from tests.rollout.test_trajectory import make_trajectory

server = pytest.importorskip("envhub.server", reason="the server extra is not installed")

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "envhub-dashboard.json"
# PromQL words that are not series: functions, aggregations, keywords
_PROMQL_WORDS = {
    "sum", "rate", "increase", "histogram_quantile", "max", "min", "avg", "by", "without",
    "on", "ignoring", "le",
}  # fmt: skip


_SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",),
             "histogram": ("_bucket", "_count", "_sum", "_created")}  # fmt: skip


def series_labels(registry: CollectorRegistry) -> dict[str, set[str] | None]:
    """Sample name as Prometheus stores it (``_total``, ``_bucket`` ...) -> its label names.
    A labelled series nothing has touched yet has no samples: its names follow from its
    type and its labels are unknown (``None``)."""
    known: dict[str, set[str] | None] = {}
    for family in registry.collect():
        for sample in family.samples:
            labels = known.setdefault(sample.name, set())
            assert labels is not None
            labels.update(sample.labels)
        if not family.samples:
            known.update((family.name + suffix, None) for suffix in _SUFFIXES[family.type])
    return known


def rollout_registry() -> CollectorRegistry:
    """Every rollout series with a sample: one episode of each outcome, one request of each."""
    metrics = RolloutMetrics()
    metrics.watch_queue("groups", lambda: 0)
    metrics.episodes_queued(2)
    for masked in (False, True):
        metrics.episode_started()
        trajectory = make_trajectory("t", int(masked), masked=masked)
        if masked:
            trajectory.error = ErrorInfo(kind="sandbox_error", message="lost")
            trajectory.stop_reason = "env_error"
        else:
            trajectory.metrics = TrajectoryMetrics(errors_by_kind={"invalid_tool_call": 1})
        metrics.episode_ended(trajectory)
    metrics.env_step(0.01)
    metrics.request_done("http://a/v1", 0.2, Completion("x", [], completion_tokens=3))
    metrics.request_failed("http://b/v1", 0.1, "connection")
    metrics.endpoint_ejected("http://b/v1")
    metrics.group_handed_over(0, 1)
    return metrics.registry


def server_registry() -> CollectorRegistry:
    """A real env server's, after a session with a tool error and a bad request."""
    app = server.create_app(["calc"])
    with serve_in_thread(app) as url, httpx.Client(base_url=url) as http:
        sid = http.post("/v1/sessions", json={"env": "calc"}).json()["session_id"]
        bad = {"id": "c1", "name": "calculate", "arguments": '{"expression": '}
        assert http.post(f"/v1/sessions/{sid}/step", json={"tool_calls": [bad]}).is_success
        http.post(f"/v1/sessions/{sid}/close")
        assert http.post("/v1/sessions", json={"env": "nope"}).status_code >= 400
    registry: CollectorRegistry = app.state.metrics.registry
    return registry


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(panel title, expr, legend format) of every target, rows' nested panels included."""
    found = []
    for panel in dashboard["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets", []):
                found.append((inner["title"], target["expr"], target.get("legendFormat", "")))
    return found


def test_dashboard_is_grafana_json_whose_queries_use_real_series_and_labels() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert isinstance(dashboard["title"], str) and dashboard["uid"]
    assert isinstance(dashboard["schemaVersion"], int)
    assert any(v["type"] == "datasource" for v in dashboard["templating"]["list"])
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["type"] in ("row", "timeseries", "stat")
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] != "row":
            assert panel["targets"] and panel["datasource"]["uid"] == "${datasource}"
            assert [t["refId"] for t in panel["targets"]] == [
                chr(ord("A") + i) for i in range(len(panel["targets"]))
            ]

    known = series_labels(rollout_registry()) | series_labels(server_registry())
    used: set[str] = set()
    for title, expr, legend in queries(dashboard):
        grouped = {
            label.strip()
            for group in re.findall(r"(?:by|without) \(([^)]*)\)", expr)
            for label in group.split(",")
        }
        matched = {
            label
            for selector in re.findall(r"\{([^}]*)\}", expr)
            for label in re.findall(r"(\w+)\s*!?=", selector)
        }
        legend_labels = set(re.findall(r"\{\{(\w+)\}\}", legend))
        # what is left once ranges, groupings and matchers are gone: functions and series
        bare = re.sub(r"\[[^\]]*\]|(?:by|without) \([^)]*\)|\{[^}]*\}", "", expr)
        names = {
            word for word in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", bare)
            if word not in _PROMQL_WORDS
        }  # fmt: skip
        assert names, f"{title}: {expr} queries no series"
        assert names <= set(known), f"{title}: unknown series {names - set(known)} in {expr}"
        used |= names
        if all(known[n] is not None for n in names):
            labels = set().union(*(known[n] or set() for n in names)) | {"le"}
            unknown = (grouped | matched | legend_labels) - labels
            assert not unknown, f"{title}: unknown labels {unknown} in {expr}"
    # the dashboard covers both sides: the rollout's series and the env server's
    assert any(n.startswith("envhub_rollout_") for n in used)
    assert any(not n.startswith("envhub_rollout_") for n in used)
