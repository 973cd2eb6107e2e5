"""docker-compose.yml and docker/: validated, and the services' commands run outside Docker.

No Docker engine runs on CI, so this file checks what can be checked without one:

- Debian's ``docker-compose`` accepts the file (``config -q``) and rejects a broken copy;
  with ``CI=true`` a missing binary is a failure, not a skip.
- The two services agree: one results directory, read-only for the dashboard, writable
  for the bench service, which reserves an NVIDIA GPU.
- The dashboard service's exact command and environment, run on this machine from the
  repository root (the image's WORKDIR holds the same layout), serve real asv results:
  the health endpoint answers ``ok``, the service's own health check passes (and fails
  when nothing listens), the overview page opened in Chromium by deep link as the server's
  first view names every machine of the results, and nothing is written into them.
  Only what Docker itself maps is translated: the results mount (a temporary copy of the
  repository's ``results/``, or of real sample asv runs while that holds none), the port
  (a free one) and the bind address (loopback).
- The bench service's entry point clones the checkout at HEAD and hands its arguments to
  ``tools/run.py`` (with ``--help``: running the suite needs a GPU).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

# _serve also puts the checkout on sys.path: `dashboard` is not an installed package.
from _serve import ON_CI, REPO, http_get, require_chromium, wait_for_health

from tools.browser import Chromium, free_port

COMPOSE_FILE = REPO / "docker-compose.yml"
RESULTS_ENV = "SAFEATTN_RESULTS"  # the results directory, in both services
PORT_ENV = "STREAMLIT_SERVER_PORT"
ADDRESS_ENV = "STREAMLIT_SERVER_ADDRESS"
SRC_ENV = "SAFEATTN_SRC"  # the bench service's mounted checkout
HEALTH_TIMEOUT_S = 90.0


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def service(name: str) -> dict[str, Any]:
    services = compose().get("services", {})
    assert name in services, f"docker-compose.yml has no {name!r} service: {sorted(services)}"
    return services[name]


def mounts(svc: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Short-syntax volumes ``source:/target[:ro|rw]`` -> {target: (source, mode)}.

    The source may hold ``:`` itself (``${VAR:-./results}``); the target is absolute."""
    found = {}
    for entry in svc.get("volumes", []):
        m = re.fullmatch(r"(?P<source>.+?):(?P<target>/[^:]*)(?::(?P<mode>ro|rw))?", str(entry))
        assert m, f"expected short volume syntax source:/target[:ro|rw], got {entry!r}"
        found[m["target"]] = (m["source"], m["mode"] or "rw")
    return found


def host_env(svc: dict[str, Any], **overrides: str) -> dict[str, str]:
    """This process's environment, the service's on top, then ``overrides`` (each must be a
    variable the service sets: the test translates Docker's mappings, it adds nothing).
    This interpreter's bin directory goes first on PATH, so ``streamlit``/``python`` are
    the ones installed beside it."""
    env = svc.get("environment", {})
    assert isinstance(env, dict), f"expected environment as a mapping, got {env!r}"
    unknown = sorted(set(overrides) - set(env))
    assert not unknown, f"the service does not set {unknown}; its environment: {env}"
    merged = {**os.environ, **{k: str(v) for k, v in env.items()}, **overrides}
    merged["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), merged.get("PATH", "")])
    return merged


def results_source() -> Path:
    """The repository's results/ when it holds asv runs, else real sample asv runs."""
    repo_results = REPO / "results"
    if any(repo_results.glob("*/machine.json")):
        return repo_results
    from tools.sample_results import cached_sample_results

    return cached_sample_results()


def tree_digest(root: Path) -> str:
    """Every file's relative path and content, hashed: any write shows."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def require_docker_compose() -> str:
    exe = shutil.which("docker-compose")
    if exe is None:
        if ON_CI:
            pytest.fail(
                "docker-compose is missing on CI.\nHINT: .ci/run installs Debian's package: "
                "apt-get install -y --no-install-recommends docker-compose"
            )
        pytest.skip("no docker-compose here (apt-get install docker-compose)")
    return exe


def run_compose_config(exe: str, compose_file: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [exe, "--project-directory", str(REPO), "-f", str(compose_file), "config", "-q"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )


# ----------------------------------------------------------------- the compose file


def test_docker_compose_accepts_the_file() -> None:
    exe = require_docker_compose()
    proc = run_compose_config(exe, COMPOSE_FILE)
    assert proc.returncode == 0, f"docker-compose config -q failed:\n{proc.stdout}{proc.stderr}"


def test_docker_compose_rejects_a_broken_gpu_reservation(tmp_path: Path) -> None:
    """The validation is not vacuous: a schema error in the bench service is caught."""
    exe = require_docker_compose()
    data = compose()
    data["services"]["bench"]["deploy"]["resources"]["reservations"]["devices"][0][
        "capabilities"
    ] = "gpu"  # must be a list
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(yaml.safe_dump(data))
    proc = run_compose_config(exe, broken)
    assert proc.returncode != 0, "docker-compose accepted capabilities: 'gpu' (not a list)"
    assert "capabilities" in proc.stderr, proc.stderr


def test_services_share_one_results_directory() -> None:
    dashboard, bench = service("dashboard"), service("bench")
    dash_target = dashboard["environment"][RESULTS_ENV]
    bench_target = bench["environment"][RESULTS_ENV]
    dash_mounts, bench_mounts = mounts(dashboard), mounts(bench)
    assert dash_target in dash_mounts, f"{RESULTS_ENV}={dash_target} is not mounted: {dash_mounts}"
    assert bench_target in bench_mounts, f"{RESULTS_ENV}={bench_target} not mounted: {bench_mounts}"
    dash_source, dash_mode = dash_mounts[dash_target]
    bench_source, bench_mode = bench_mounts[bench_target]
    assert dash_source == bench_source, (dash_source, bench_source)
    assert (dash_mode, bench_mode) == ("ro", "rw"), (dash_mode, bench_mode)
    # The bench service benchmarks the checkout it is started from, read-only.
    assert mounts(bench)[bench["environment"][SRC_ENV]] == (".", "ro")


def test_dashboard_publishes_its_port_and_checks_health() -> None:
    dashboard = service("dashboard")
    port = dashboard["environment"][PORT_ENV]
    assert f"{port}:{port}" in dashboard["ports"], dashboard["ports"]
    test = dashboard["healthcheck"]["test"]
    assert test[0] == "CMD" and (REPO / test[-1]).is_file(), test


def test_bench_reserves_an_nvidia_gpu() -> None:
    devices = service("bench")["deploy"]["resources"]["reservations"]["devices"]
    assert any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", []) for d in devices)


# ---------------------------------------------------- the dashboard service, outside Docker


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The dashboard service's command running on this machine over a copy of real results.

    Yields ``base`` (URL), ``env`` (the process environment), ``results`` (the copy),
    ``digest`` (of the copy before serving) and ``machines`` (its machine directories).
    """
    dashboard = service("dashboard")
    command = dashboard["command"]
    assert isinstance(command, list), f"use the exec form (a list), not {command!r}"
    results = tmp_path_factory.mktemp("compose") / "results"
    shutil.copytree(results_source(), results, symlinks=True)
    port = free_port()
    env = host_env(
        dashboard, **{RESULTS_ENV: str(results), PORT_ENV: str(port), ADDRESS_ENV: "127.0.0.1"}
    )
    log_path = results.parent / "streamlit.log"
    base = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_health(base, server, log_path, HEALTH_TIMEOUT_S,
                        f"the dashboard service's command {command}")
        yield {
            "base": base, "env": env, "results": results, "digest": tree_digest(results),
            "machines": sorted(p.parent.name for p in results.glob("*/machine.json")),
        }
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def run_healthcheck(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The dashboard service's health check command, as Docker runs it (CMD form)."""
    test = service("dashboard")["healthcheck"]["test"]
    return subprocess.run(test[1:], cwd=REPO, env=env, capture_output=True, text=True, timeout=30)


def test_dashboard_service_answers_and_passes_its_health_check(served: dict[str, Any]) -> None:
    status, body = http_get(f"{served['base']}/_stcore/health")
    assert (status, body.strip()) == (200, "ok")
    status, page = http_get(served["base"] + "/")
    assert status == 200 and '<div id="root">' in page, page[:500]
    check = run_healthcheck(served["env"])
    assert check.returncode == 0, check.stdout + check.stderr


def test_dashboard_service_shows_every_machine_in_chromium(served: dict[str, Any]) -> None:
    chromium = require_chromium()
    assert served["machines"], f"no asv machine directories in {served['results']}"
    # A deep link as the server's first page view, as a shared URL after a restart is:
    # the pages must import dashboard.* without the entry script having run before.
    with Chromium(chromium) as browser:
        seen = browser.check_page(f"{served['base']}/overview")
        text = browser.evaluate("document.body.innerText") or ""
    assert not seen.exceptions, seen.exceptions
    assert "overview" in seen.title.lower(), seen.title
    missing = [m for m in served["machines"] if m not in text]
    assert not missing, f"the overview does not name {missing}; it shows:\n{text[:3000]}"
    # The results are mounted read-only in Docker: serving them must not write there.
    assert tree_digest(served["results"]) == served["digest"]


def test_health_check_fails_when_nothing_answers() -> None:
    env = host_env(service("dashboard"), **{PORT_ENV: str(free_port())})
    check = run_healthcheck(env)
    assert check.returncode != 0 and "unhealthy" in check.stdout, check.stdout + check.stderr


# ------------------------------------------------------- the bench service's entry point


def entrypoint_script() -> Path:
    """The repository file the image installs as the bench service's entry point."""
    name = service("bench")["entrypoint"][0]
    dockerfile = (REPO / service("bench")["build"]["dockerfile"]).read_text()
    for line in dockerfile.splitlines():
        m = re.match(r"COPY\s+(\S+)\s+(\S+)\s*$", line)
        if m and Path(m.group(2)).name == name:
            return REPO / m.group(1)
    raise AssertionError(f"the bench Dockerfile does not COPY anything to {name!r}")


def test_bench_entrypoint_clones_head_and_passes_arguments_to_run_py(tmp_path: Path) -> None:
    bench = service("bench")
    results = tmp_path / "results"
    env = host_env(bench, **{SRC_ENV: str(REPO), RESULTS_ENV: str(results)})
    env["TMPDIR"] = str(tmp_path)
    args = [*bench["entrypoint"][1:], "--help"]
    proc = subprocess.run(
        ["bash", str(entrypoint_script()), *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert f"cloning {REPO} at {head[:12]}" in out, out
    assert "usage:" in out and "--range" in out, out  # tools/run.py's own --help
    clones = list(tmp_path.glob("safeattn-bench.*"))
    assert len(clones) == 1, clones
    cloned = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=clones[0], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert cloned == head


# ---------------------------------------------------------- what the images pip-install


def test_image_requirements_come_from_pyproject() -> None:
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = config["project"]
    proc = subprocess.run(
        [sys.executable, "docker/requirements.py", "pyproject.toml", "--build-system", "bench"],
        cwd=REPO, capture_output=True, text=True, check=True,
    )
    expected = [
        *project["dependencies"],
        *project["optional-dependencies"]["bench"],
        *config["build-system"]["requires"],
    ]
    assert proc.stdout.splitlines() == list(dict.fromkeys(expected))
    bad = subprocess.run(
        [sys.executable, "docker/requirements.py", "pyproject.toml", "no-such-extra"],
        cwd=REPO, capture_output=True, text=True,
    )
    assert bad.returncode != 0 and "no-such-extra" in bad.stderr, bad.stderr
