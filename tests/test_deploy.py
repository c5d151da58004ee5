"""The deployment files in deploy/: what the schema validators cannot check.

scripts/validate_deploy.sh checks the files against their schemas (Compose, Kubernetes)
and lints them (yamllint, hadolint). These tests check that they fit *this* app: only
settings that bot/config.py reads, PostgreSQL for several replicas, probes and the
image's health check on /healthz, a non-root user, a grace period longer than the app's.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiohttp import web
from pydantic import SecretStr

from bot.config import (
    Settings,
    load_approval_rules,
    load_connector_sections,
    load_group_rules,
)
from connectors.config import ENV_OVERRIDE

from support.servers import serving

yaml = pytest.importorskip("yaml", reason="the deploy checks read YAML: pip install -e '.[deploy]'")

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
FIELDS = Settings.model_fields
SHUTDOWN_GRACE = FIELDS["larkgate_shutdown_grace_seconds"].default
# `larkgate serve` gives the server 5 s beyond the grace to close (bot/cli.py).
STOP_SECONDS = SHUTDOWN_GRACE + 5
DEFAULT_PORT = FIELDS["larkgate_port"].default
SETTINGS = {name.upper() for name in FIELDS}
SECRET_SETTINGS = {name.upper() for name, info in FIELDS.items() if info.annotation is SecretStr}


def is_setting(name: str) -> bool:
    return name in SETTINGS or bool(ENV_OVERRIDE.match(name))  # <NAME>_CONNECTOR_<SETTING>


def settings_from(values: dict[str, str]) -> Settings:
    """Settings built from these values alone (no environment, no .env): they must load."""
    return Settings(_env_file=None, **{k.lower(): v for k, v in values.items()})  # type: ignore[call-arg]


def interpolate(text: str) -> str:
    """Compose's ${VAR:-default} with the defaults, as on a machine that sets nothing."""
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", text)


def seconds(duration: str) -> float:
    match = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", duration)
    assert match and duration, f"not a Compose duration: {duration!r}"
    return int(match[1] or 0) * 60 + int(match[2] or 0)


# --- Compose --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))


def test_compose_runs_postgres_16_with_a_volume_and_a_health_check(compose):
    postgres = compose["services"]["postgres"]
    assert postgres["image"].startswith("postgres:16")
    assert postgres["restart"]
    volume = postgres["volumes"][0].split(":")[0]
    assert volume in compose["volumes"], "the data lives in a named volume"
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])


def test_compose_starts_the_bot_once_postgres_is_healthy(compose):
    bot = compose["services"]["larkgate"]
    assert bot["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert bot["restart"]
    assert bot["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
    assert (DEPLOY / bot["build"]["context"] / bot["build"]["dockerfile"]).is_file()
    assert Path(bot["env_file"]).name == ".env"
    assert f"{DEFAULT_PORT}:{bot['environment']['LARKGATE_PORT']}" in bot["ports"]
    assert seconds(bot["stop_grace_period"]) > STOP_SECONDS


def test_compose_points_the_bot_at_the_postgres_service(compose):
    url = interpolate(compose["services"]["larkgate"]["environment"]["DATABASE_URL"])
    parts = urlsplit(url)
    assert parts.scheme == "postgresql+asyncpg"
    assert parts.hostname == "postgres"
    postgres_env = compose["services"]["postgres"]["environment"]
    assert parts.username == postgres_env["POSTGRES_USER"]
    assert parts.password == interpolate(postgres_env["POSTGRES_PASSWORD"])
    assert parts.path == "/" + postgres_env["POSTGRES_DB"]


def test_compose_sets_only_real_settings(compose):
    environment = compose["services"]["larkgate"]["environment"]
    unknown = [name for name in environment if not is_setting(name)]
    assert not unknown, f"compose.yaml sets what larkgate does not read: {unknown}"
    settings_from({k: interpolate(str(v)) for k, v in environment.items()})


# --- Kubernetes -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def resources() -> dict[tuple[str, str], dict[str, Any]]:
    """Every object in deploy/kubernetes, by (kind, name)."""
    found = {}
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if document is not None:
                found[document["kind"], document["metadata"]["name"]] = document
    return found


def the(resources, kind: str) -> list[dict[str, Any]]:
    return [obj for (k, _), obj in resources.items() if k == kind]


@pytest.fixture(scope="module")
def deployment(resources) -> dict[str, Any]:
    (only,) = the(resources, "Deployment")
    return only


@pytest.fixture(scope="module")
def container(deployment) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def container_port(container, port: int | str) -> int:
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in container["ports"] if p.get("name") == port]
    return number


def test_the_files_hold_the_expected_objects(resources):
    assert sorted(resources) == [
        ("ConfigMap", "larkgate-env"),
        ("ConfigMap", "larkgate-toml"),
        ("Deployment", "larkgate"),
        ("Secret", "larkgate-secrets"),
        ("Service", "larkgate"),
    ]


def test_the_deployment_runs_two_replicas(deployment):
    assert deployment["spec"]["replicas"] == 2
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()


@pytest.mark.parametrize("probe", ["readinessProbe", "livenessProbe"])
def test_probes_ask_healthz_on_the_app_port(container, probe):
    check = container[probe]["httpGet"]
    assert check["path"] == "/healthz"
    assert container_port(container, check["port"]) == DEFAULT_PORT


def test_the_pod_runs_as_non_root_on_a_read_only_filesystem(deployment, container):
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["requests"] and container["resources"]["limits"]
    # A Service named larkgate would otherwise inject LARKGATE_PORT=tcp://...
    assert pod["enableServiceLinks"] is False


def test_the_pod_outlives_the_apps_shutdown_grace(deployment, container):
    pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("exec", {})
    pause = float(pre_stop["command"][-1]) if pre_stop.get("command", [""])[0] == "sleep" else 0
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > pause + STOP_SECONDS


def test_the_pod_takes_its_settings_from_the_configmap_and_the_secret(resources, container):
    refs = {
        ("ConfigMap" if "configMapRef" in source else "Secret"): source.get(
            "configMapRef", source.get("secretRef")
        )["name"]
        for source in container["envFrom"]
    }
    assert ("ConfigMap", refs["ConfigMap"]) in resources
    assert ("Secret", refs["Secret"]) in resources


def test_the_configmap_and_secret_hold_only_real_settings_and_load(resources):
    env = resources["ConfigMap", "larkgate-env"]["data"]
    secret = resources["Secret", "larkgate-secrets"]["stringData"]
    for name in [*env, *secret]:
        assert is_setting(name), f"{name} is not a larkgate setting"
    assert not SECRET_SETTINGS & set(env), "secret settings belong in the Secret"
    assert set(secret) == {
        "FEISHU_APP_SECRET",
        "FEISHU_VERIFICATION_TOKEN",
        "FEISHU_ENCRYPT_KEY",
        "LLM_API_KEY",
        "DATABASE_URL",
    }
    assert secret["DATABASE_URL"].startswith("postgresql+asyncpg://"), "replicas need PostgreSQL"
    assert all(isinstance(value, str) for value in [*env.values(), *secret.values()])
    settings = settings_from({**env, **secret})
    assert settings.larkgate_port == DEFAULT_PORT
    assert settings.larkgate_shutdown_grace_seconds == SHUTDOWN_GRACE


def test_the_mounted_larkgate_toml_is_where_larkgate_config_points(
    resources, deployment, container, tmp_path
):
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    (mount,) = [m for m in container["volumeMounts"] if "configMap" in volumes[m["name"]]]
    configmap = resources["ConfigMap", volumes[mount["name"]]["configMap"]["name"]]
    assert "larkgate.toml" in configmap["data"]
    expected = f"{mount['mountPath']}/larkgate.toml"
    assert resources["ConfigMap", "larkgate-env"]["data"]["LARKGATE_CONFIG"] == expected
    # The file is one the loaders accept.
    path = tmp_path / "larkgate.toml"
    path.write_text(configmap["data"]["larkgate.toml"], encoding="utf-8")
    load_group_rules(path)
    load_approval_rules(path)
    sections, explicit = load_connector_sections(path)
    assert explicit and "utilities" in sections


def test_the_service_sends_port_80_to_the_app(resources, deployment, container):
    (service,) = the(resources, "Service")
    assert service["spec"]["type"] == "ClusterIP"
    (port,) = service["spec"]["ports"]
    assert port["port"] == 80
    assert container_port(container, port["targetPort"]) == DEFAULT_PORT
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


# --- Dockerfile -----------------------------------------------------------------------


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments), with continuation lines joined and comments dropped."""
    instructions, pending = [], ""
    for raw in (DEPLOY / "Dockerfile").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, arguments = (pending + line).partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
        pending = ""
    return instructions


def final_stage() -> list[tuple[str, str]]:
    instructions = dockerfile()
    last_from = max(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    return instructions[last_from:]


def test_the_image_builds_in_two_stages_on_python_3_11_slim():
    instructions = dockerfile()
    args = dict(a.split("=", 1) for k, a in instructions if k == "ARG" and "=" in a)
    bases = [a.split()[0] for k, a in instructions if k == "FROM"]
    assert len(bases) == 2
    assert all(args.get(base.strip("${}"), base) == "python:3.11-slim" for base in bases)
    copies = [a for k, a in final_stage() if k == "COPY"]
    assert copies == ["--from=builder /opt/venv /opt/venv"], "only the virtualenv is copied"


def test_the_image_runs_as_a_non_root_user():
    users = [a for k, a in final_stage() if k == "USER"]
    assert users, "the final stage sets USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")


def test_the_image_serves_on_the_default_port():
    stage = final_stage()
    assert ("EXPOSE", str(DEFAULT_PORT)) in stage
    (cmd,) = [a for k, a in stage if k == "CMD"]
    assert json.loads(cmd) == ["larkgate", "serve"]


def test_the_image_sets_no_secret_and_only_known_variables():
    for keyword, arguments in dockerfile():
        if keyword not in ("ENV", "ARG"):
            continue
        for name in re.findall(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=", arguments):
            assert name not in SECRET_SETTINGS | {"DATABASE_URL"}, f"{name} is baked in"
            assert (
                is_setting(name)
                or name in ("PATH", "PYTHON_IMAGE")
                or name.startswith(("PIP_", "PYTHON"))
            ), f"{keyword} {name}: not a larkgate setting"


def healthcheck_code() -> str:
    (healthcheck,) = [a for k, a in final_stage() if k == "HEALTHCHECK"]
    exec_form = json.loads(healthcheck[healthcheck.index("CMD") + 3 :])
    assert exec_form[:2] == ["python", "-c"], "slim has no curl: the check is Python"
    return exec_form[2]


async def run_healthcheck(port: int) -> int:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        healthcheck_code(),
        env={**os.environ, "LARKGATE_PORT": str(port)},
        stderr=asyncio.subprocess.DEVNULL,
    )
    return await asyncio.wait_for(process.wait(), timeout=30)


async def test_the_health_check_passes_on_200_and_fails_on_503_or_no_server():
    status = {"code": 200}

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({}, status=status["code"])

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    async with serving(app) as served:
        port = served.port
        assert await run_healthcheck(port) == 0
        status["code"] = 503
        assert await run_healthcheck(port) != 0
    assert await run_healthcheck(port) != 0  # nothing listens any more


def test_the_build_context_leaves_out_secrets_and_local_state():
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    for entry in (".env", ".git", ".venv", "*.db"):
        assert entry in ignored
