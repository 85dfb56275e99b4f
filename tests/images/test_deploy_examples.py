"""The deployment examples under ``deploy/`` (Kubernetes, compose) describe the images
``envhub image build`` makes: repository, port, health probe, user, read-only root and
writable paths, token variable. Checked structurally (nothing can be applied here), and
against a built image's own configuration where Docker is available."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from envhub.environment_images import CONTAINER_PORT
from envhub.environment_images.recipe import load_env_recipe
from envhub.sandboxes.docker_cli import run_docker
from tests.images.conftest import IMAGE_ENVS

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _k8s(env: str) -> tuple[dict[str, Any], dict[str, Any]]:
    docs = {d["kind"]: d for d in yaml.safe_load_all((DEPLOY / "k8s" / f"{env}.yaml").read_text())}
    assert set(docs) == {"Deployment", "Service"}
    return docs["Deployment"], docs["Service"]


@pytest.mark.parametrize("env", [*IMAGE_ENVS, "web"])
def test_kubernetes_deployment_and_service_match_the_image(env: str) -> None:
    deployment, service = _k8s(env)
    recipe = load_env_recipe(env)
    pod = deployment["spec"]["template"]["spec"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    (container,) = pod["containers"]
    assert container["image"].rsplit(":", 1)[0] == f"envhub/{env}"
    assert [p["containerPort"] for p in container["ports"]] == [CONTAINER_PORT]
    assert [p["targetPort"] for p in service["spec"]["ports"]] == [CONTAINER_PORT]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": CONTAINER_PORT}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 1000
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is recipe.read_only
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert sorted(mounts.values()) == sorted(recipe.tmpfs)
    assert all("emptyDir" in v for v in pod["volumes"] if v["name"] in mounts)
    assert [e["name"] for e in container["env"]] == ["ENVHUB_TOKEN"]


def test_compose_runs_calc_sql_and_search_on_loopback_ports() -> None:
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == set(IMAGE_ENVS)
    host_ports = set()
    for env, service in services.items():
        assert service["image"].rsplit(":", 1)[0] == f"envhub/{env}"
        (published,) = service["ports"]
        host_ip, host_port, container_port = published.split(":")
        assert host_ip == "127.0.0.1" and int(container_port) == CONTAINER_PORT
        host_ports.add(host_port)
        assert service["read_only"] is load_env_recipe(env).read_only
        assert service["tmpfs"] == load_env_recipe(env).tmpfs
        assert service["user"] == "1000:1000" and service["cap_drop"] == ["ALL"]
        assert "ENVHUB_TOKEN" in service["environment"]
        assert f":{CONTAINER_PORT}/health" in " ".join(service["healthcheck"]["test"])
    assert len(host_ports) == len(services)
    options = compose["networks"]["envhub"]["driver_opts"]
    assert options["com.docker.network.bridge.enable_ip_masquerade"] == "false"


def test_examples_match_the_built_images(env_images: dict[str, str]) -> None:
    """The user, port and entrypoint the examples assume are the images' own."""
    for env, tag in env_images.items():
        config = json.loads(
            run_docker("image", "inspect", "-f", "{{json .Config}}", tag, check=True).stdout
        )  # fmt: skip
        assert config["User"] == "1000:1000"
        assert list(config["ExposedPorts"]) == [f"{CONTAINER_PORT}/tcp"]
        assert config["Entrypoint"][:3] == ["envhub", "serve", env]
        assert config["Healthcheck"]["Test"][0] == "CMD"
        assert config["Labels"]["envhub.run.tmpfs"] == ",".join(load_env_recipe(env).tmpfs)
