"""docs/prometheus and the README say what the code does: the configs and rules pass promtool, and
CI runs the README's own test command."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.support.prometheus import binary

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "prometheus"


def test_scrape_config_and_rules_pass_promtool():
    promtool = binary("promtool")
    rules = subprocess.run([promtool, "check", "rules", str(DOCS / "lpxtop.rules.yml")],
                           capture_output=True, text=True, timeout=60)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert "10 rules found" in rules.stdout
    config = subprocess.run([promtool, "check", "config", str(DOCS / "prometheus.yml")],
                            capture_output=True, text=True, timeout=60)
    assert config.returncode == 0, config.stdout + config.stderr


def test_the_systemd_unit_runs_the_exporter():
    unit = (DOCS / "lpxtop-exporter.service").read_text()
    sections = re.findall(r"^\[(\w+)\]$", unit, re.M)
    assert sections == ["Unit", "Service", "Install"]
    assert re.search(r"^ExecStart=\S*lpxtop exporter .*--listen ", unit, re.M)


def test_ci_runs_the_readme_test_command_and_requires_prometheus():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    command = "pip install -e '.[test]' && python -m pytest"
    assert command in readme and f"\n{command}\n" in ci
    assert "export LPXTOP_REQUIRE_PROMETHEUS=1" in ci and "apt-get install" in ci
    assert "127.0.0.1 unless `--listen`" in readme  # /probe's risk, said where users read it


def test_the_fleet_docs_scrape_config_passes_promtool(tmp_path):
    doc = (ROOT / "docs" / "fleet.md").read_text()
    blocks = re.findall(r"```yaml\n(scrape_configs:.*?)```", doc, re.S)
    assert len(blocks) == 1
    config = tmp_path / "prometheus.yml"
    config.write_text(blocks[0])
    result = subprocess.run([binary("promtool"), "check", "config", str(config)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
