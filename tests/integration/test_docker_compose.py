"""docker-compose.yml, checked by Debian's `docker-compose config` (v1; scripts/install puts
it in place). It validates and resolves the file without a Docker engine."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / ".env.example"
SERVICES = {"kafka", "minio", "minio-init", "postgres", "mailpit", "airflow-init",
            "airflow-api-server", "airflow-scheduler", "airflow-dag-processor",
            "airflow-triggerer", "spark-connect"}


def compose_config(env_file: Path) -> subprocess.CompletedProcess:
    # a clean environment: only the env file may supply the variables
    return subprocess.run(["docker-compose", "--env-file", str(env_file), "config"], cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=120)


def example_values() -> dict[str, str]:
    return dict(line.split("=", 1) for line in EXAMPLE.read_text().splitlines()
                if line and not line.startswith("#"))


def test_compose_file_resolves_with_the_example_env():
    result = compose_config(EXAMPLE)
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert set(services) == SERVICES
    assert services["spark-connect"]["image"] == "kafka-archive-airflow:local"
    assert "ports" not in services["spark-connect"]  # reached by the Airflow containers only
    assert "spark-connect" in services["airflow-scheduler"]["depends_on"]
    for name in SERVICES - {"kafka", "minio", "minio-init", "postgres", "mailpit", "spark-connect"}:
        assert services[name]["image"] == "kafka-archive-airflow:local"
        mounts = {v.split(":")[1] for v in services[name]["volumes"]}
        assert {"/opt/airflow/dags", "/opt/airflow/config"} <= mounts
        assert "/opt/airflow/plugins" not in mounts  # the wheel brings the library
    for name, service in services.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
    secret = example_values()["POSTGRES_PASSWORD"]  # reaches Airflow through interpolation
    assert secret in services["airflow-scheduler"]["environment"]["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]


def test_no_credential_is_written_in_the_compose_file():
    text = (ROOT / "docker-compose.yml").read_text()
    secrets = {k: v for k, v in example_values().items()
               if re.search(r"PASSWORD|SECRET|KEY", k)}
    assert len(secrets) >= 5
    for name, value in secrets.items():
        assert value not in text, f"{name}'s value is written in docker-compose.yml"
    # every secret-looking setting is a ${VAR} reference
    settings = re.findall(r"^\s*([A-Z_]*(?:PASSWORD|SECRET|FERNET)[A-Z_]*): (.*)$", text, re.M)
    assert len(settings) >= 5
    for key, value in settings:
        assert value.startswith("${"), f"{key} is not a ${{VAR}} reference: {value}"
    assert "/.env\n" in (ROOT / ".gitignore").read_text()


def test_compose_refuses_to_resolve_without_the_credentials(tmp_path):
    partial = tmp_path / "partial.env"
    partial.write_text("".join(f"{k}={v}\n" for k, v in example_values().items()
                               if k != "POSTGRES_PASSWORD"))
    result = compose_config(partial)
    assert result.returncode != 0
    assert "set POSTGRES_PASSWORD in .env" in result.stderr


def test_the_image_installs_the_wheel_into_airflows_own_image_without_test_tools():
    """Nothing of the checkout but the wheel it builds: no requirements.txt (its pins carry
    the test tools and Airflow's own pin), Airflow's version held where it is."""
    dockerfile = (ROOT / "docker" / "airflow.Dockerfile").read_text()
    assert "COPY requirements" not in dockerfile and " -r " not in dockerfile
    assert re.search(r'FROM apache/airflow:\S+', dockerfile)
    assert re.search(r'pip install .*"apache-airflow==\$\{AIRFLOW_VERSION\}"', dockerfile)
    assert "kafka_archive-*.whl)[spark,tables]" in dockerfile
