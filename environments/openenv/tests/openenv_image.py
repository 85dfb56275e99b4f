"""The OpenEnv server image the ``image=`` tests run: ``adder`` (openenv_servers.py) as
``openenv build`` would package it, made without network and without pulls.

OpenEnv and its dependencies are copied from the OpenEnv venv (``.ci/openenv_setup.sh``:
the same cp311 wheels, on the same Python minor version as Debian bookworm's python3)
onto envhub's local ``python`` sandbox image (``.ci/sandbox_setup.sh``), and built with
``docker build --network none`` through :func:`~envhub.sandboxes.images.build_image_once`
(its lock and exists-check): once per content, since the tag hashes the Dockerfile, the
server, the base image and the venv's distributions. CI builds it in the background of
its setup (about 10 to 30 s on a loaded 2-core machine), so the tests find the tag:

    .venv/bin/python environments/openenv/tests/openenv_image.py .venv-openenv/bin/python
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from envhub.errors import SandboxError
from envhub.sandboxes.docker_cli import run_docker
from envhub.sandboxes.images import build_image_once, image_exists, image_tag

__all__ = ["build_adder_image"]

SERVERS = Path(__file__).resolve().with_name("openenv_servers.py")
#: what the image leaves out of the OpenEnv venv: what the ``adder`` server never imports
#: (gradio, kept out by openenv_servers.py, and the data stack it pulls in), and pip. The
#: venv's bytecode goes in: a container then compiles only what the venv never imported
#: (about 1 s of each container's start here)
NOT_IN_IMAGE = ("gradio", "gradio_client", "pandas", "numpy", "numpy.libs", "PIL",
                "pillow.libs", "hf_xet", "pip")
DOCKERFILE = """\
FROM {base}
COPY site /opt/openenv/site
COPY openenv_servers.py /opt/openenv/openenv_servers.py
ENV PYTHONPATH=/opt/openenv/site PYTHONDONTWRITEBYTECODE=1
USER 1000:1000
EXPOSE 8000
CMD ["python3", "/opt/openenv/openenv_servers.py", "adder", "--host", "0.0.0.0", "--port", "8000"]
"""


def build_adder_image(python: Path) -> str:
    """The image's tag, built first unless it exists; ``python`` is the OpenEnv venv's."""
    base = image_tag("python")
    if not image_exists(base):
        raise SandboxError(f"no {base}: bash .ci/sandbox_setup.sh builds it")
    site = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip())  # fmt: skip
    dockerfile = DOCKERFILE.format(base=base)
    h = hashlib.sha256(dockerfile.encode() + SERVERS.read_bytes())
    h.update(run_docker("image", "inspect", "-f", "{{.Id}}", base).stdout.encode())
    h.update("\n".join(sorted(p.name for p in site.glob("*.dist-info"))).encode())
    tag = f"envhub-test/openenv-adder:{h.hexdigest()[:12]}"

    def build() -> None:
        # the context, streamed as a tar: the Dockerfile and the server, the venv as site/
        with tempfile.TemporaryDirectory(prefix="envhub-openenv-image-") as tmp:
            (Path(tmp) / "Dockerfile").write_text(dockerfile)
            shutil.copy(SERVERS, tmp)
            # --warning=no-file-changed, and exit status 1 taken as success: CI's uv
            # installs into other venvs meanwhile hard-link the same cached files, and a
            # new link changes a file's ctime (not its content), which GNU tar reports as
            # "file changed as we read it", exit 1; this venv itself is not written to
            tar = subprocess.Popen(
                ["tar", "-c", "--warning=no-file-changed", "-C", tmp, "Dockerfile",
                 SERVERS.name, "-C", str(site), "--transform", "s,^\\./,site/,",
                 *(f"--exclude=./{name}" for name in NOT_IN_IMAGE), "."],
                stdout=subprocess.PIPE)  # fmt: skip
            proc = run_docker("build", "--network", "none", "--force-rm", "-q", "-t", tag, "-",
                              stdin=tar.stdout, timeout=600)
            tar.wait()
        if tar.returncode not in (0, 1) or proc.returncode != 0:
            raise SandboxError(f"building {tag} failed: {proc.stderr.strip()[-1500:]}")

    return build_image_once(tag, build)


def main() -> None:
    start = time.monotonic()
    tag = build_adder_image(Path(sys.argv[1]))
    print(f"{tag} ({time.monotonic() - start:.0f} s)")


if __name__ == "__main__":
    main()
