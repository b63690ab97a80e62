"""The documentation site (issue 55): it builds with `mkdocs build --strict` (a broken link
or a page outside the nav fails), its generated references cover every config key, CLI
flag and alert mail, and the README stays one screen."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from kafka_archive.monitor import alerts

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs"))
import hooks  # noqa: E402  (docs/hooks.py)
import mail_examples  # noqa: E402


def test_the_site_builds_strict(tmp_path):
    done = subprocess.run([str(Path(sys.executable).parent / "mkdocs"), "build", "--strict",
                           "--site-dir", str(tmp_path / "site")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for page in ["configure/reference", "reference/cli", "operate/mails/data-lost",
                 "deploy/airflow"]:
        assert (tmp_path / "site" / page / "index.html").is_file(), page


def test_every_config_key_is_in_the_generated_reference():
    page = hooks.config_reference()
    for path, _, name in hooks.config_keys():
        section = path.rsplit(".", 1)[0] if "." in path else ""
        heading = f"## `{section}`" if section else "## The top level"
        rows = page.split(heading + "\n", 1)[1].split("\n## ", 1)[0]
        assert f"| `{name}` |" in rows, path
    assert len(hooks.config_keys()) > 60
    # every key the example config uses is a key of the reference
    example = yaml.safe_load((ROOT / "config" / "kafka-archive.yaml").read_text())
    assert set(example) <= {p for p, _, _ in hooks.config_keys() if "." not in p}


def test_a_wrong_value_gets_the_error_the_reference_shows():
    assert "must be a duration" in hooks.wrong_value_error("groups.<name>.deadline")
    assert "must be 'earliest' or 'latest'" in hooks.wrong_value_error("groups.<name>.start_from")


def test_every_cli_flag_is_in_the_generated_reference():
    page = hooks.cli_reference()
    flags = hooks.cli_flags()
    assert {" --config", "rewind --to-offset", "replay --max-rate"} <= flags
    for flag in flags:
        command, option = flag.rsplit(" ", 1)
        section = page.split(f"## `kafka-archive {command}`", 1)[1] if command else page
        assert option in section.split("\n## ", 1)[0], flag


def test_every_alert_mail_has_its_runbook_page_and_links_to_it():
    nav = (ROOT / "mkdocs.yml").read_text()
    assert set(mail_examples.EXAMPLES) == set(alerts.MAIL_KINDS)
    for kind, example in mail_examples.EXAMPLES.items():
        message = example.render()
        assert f'href="{alerts.RUNBOOK}{kind}/"' in message.html, kind
        assert message.kind == kind and message.group  # its count in the `mails` metric
        assert f"operate/mails/{kind}.md" in nav, kind
        page = hooks.mail_page(kind)
        assert message.subject in page and "## What to do" in page


def test_the_deploy_pages_dag_file_is_the_one_the_deployment_test_runs():
    """tests/integration/test_deployment.py writes the DAG file this page shows."""
    from tests.integration.test_deployment import DAG_FILE

    page = (ROOT / "docs" / "deploy" / "airflow.md").read_text()
    assert DAG_FILE == re.search(r"```python\n(.*?)```", page, re.S)[1]


def test_the_readme_is_one_screen_with_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 120
    assert "scripts/demo" in readme and "scripts/test" in readme
    assert "exec scripts/test" in (ROOT / ".ci" / "run").read_text()


def test_the_readmes_config_example_loads(tmp_path):
    """The README's table group (Avro values into a typed table) is a config that loads."""
    from kafka_archive import config

    readme = (ROOT / "README.md").read_text()
    example = tmp_path / "kafka-archive.yaml"
    example.write_text(re.search(r"```yaml\n(.*?)```", readme, re.S)[1])
    loaded = config.load(example)
    assert loaded.group("orders").parsed_table
    assert loaded.schema_registry_conn_id == "shop_registry"
