"""The KubeRay manifest under deploy/ cannot be applied here (no cluster, no registry), so
its structure is what is checked: a RayCluster KubeRay accepts, on an image built from the
shipped Dockerfile, with the Ray version envhub's ray extra installs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import tomllib
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
KUBERAY = ROOT / "deploy" / "kuberay"


def _cluster() -> dict:
    return yaml.safe_load((KUBERAY / "raycluster.yaml").read_text())


def _containers(cluster: dict) -> list[dict]:
    groups = [cluster["spec"]["headGroupSpec"], *cluster["spec"]["workerGroupSpecs"]]
    return [c for g in groups for c in g["template"]["spec"]["containers"]]


def test_the_manifest_is_a_raycluster_with_a_head_and_a_sandbox_worker_group() -> None:
    cluster = _cluster()
    assert cluster["apiVersion"] == "ray.io/v1" and cluster["kind"] == "RayCluster"
    head = cluster["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"  # no replica on the head
    assert any(p.get("containerPort") == 6379 for p in head["template"]["spec"]["containers"][0]
               ["ports"])  # the GCS port `envhub fleet up --address` names
    (workers,) = cluster["spec"]["workerGroupSpecs"]
    assert workers["minReplicas"] <= workers["replicas"] <= workers["maxReplicas"]
    # KubeRay passes this verbatim to `ray start --resources`: a JSON object in quotes
    resources = json.loads(json.loads(workers["rayStartParams"]["resources"]))
    assert resources["sandbox_slots"] > 0
    for container in _containers(cluster):
        limits, requests = container["resources"]["limits"], container["resources"]["requests"]
        assert limits == requests  # guaranteed QoS: a replica is not evicted under pressure


def test_every_node_runs_the_image_of_the_shipped_dockerfile_at_the_clusters_ray_version() -> None:
    cluster = _cluster()
    dockerfile = (KUBERAY / "Dockerfile").read_text()
    base = re.search(r"^FROM rayproject/ray:(\S+)-py311$", dockerfile, re.MULTILINE)
    assert base is not None
    assert base.group(1) == cluster["spec"]["rayVersion"]
    images = {c["image"] for c in _containers(cluster)}
    tag = re.search(r"-t <registry>/(\S+) \.", dockerfile)
    assert tag is not None and images == {tag.group(1)}
    assert "[server,rollout,ray]" in dockerfile


def test_the_clusters_ray_version_is_one_the_ray_extra_installs() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    (ray,) = [Requirement(r) for r in extras["ray"] if Requirement(r).name == "ray"]
    assert ray.specifier.contains(_cluster()["spec"]["rayVersion"])
