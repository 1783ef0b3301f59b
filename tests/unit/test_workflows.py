"""The GitHub Actions workflows parse, and do what the unattended rebases rely on.

actionlint (nox -s lint) checks their syntax, expressions and shell; this checks the intent:
the release watch runs `forkgen outdated` then `forkgen rebase --latest` on a schedule and on
demand, with the permissions to push a branch, open a pull request and an issue; the nightly
watch does the same against keras-nightly and publishes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from forkgen.errors import EXIT_OUTDATED

WORKFLOWS = Path(__file__).resolve().parents[2] / ".github" / "workflows"


def load(name: str) -> dict[str, Any]:
    document = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    # YAML 1.1 reads the key `on` as True.
    document["on"] = document.pop(True, document.get("on"))
    return document


def steps(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


def scripts(workflow: dict[str, Any]) -> list[str]:
    return [step["run"] for step in steps(workflow) if "run" in step]


def index_of(workflow: dict[str, Any], needle: str) -> int:
    found = [i for i, script in enumerate(scripts(workflow)) if needle in script]
    assert found, f"no step runs {needle!r}"
    return found[0]


@pytest.mark.parametrize("path", sorted(WORKFLOWS.glob("*.yml")), ids=lambda p: p.name)
def test_every_workflow_parses_with_jobs_and_steps(path: Path) -> None:
    workflow = load(path.name)
    assert workflow["on"] and workflow["jobs"]
    for name, job in workflow["jobs"].items():
        assert job.get("runs-on") and job.get("steps"), name
        for step in job["steps"]:
            assert ("run" in step) != ("uses" in step), step


def test_release_watch() -> None:
    workflow = load("release-watch.yml")
    assert workflow["on"]["schedule"] and "cron" in workflow["on"]["schedule"][0]
    assert "workflow_dispatch" in workflow["on"]
    assert workflow["permissions"] == {"contents": "write", "pull-requests": "write", "issues": "write"}
    outdated = index_of(workflow, "forkgen outdated")
    rebase = index_of(workflow, "forkgen rebase --latest")
    assert outdated < rebase
    # it branches on outdated's documented exit code, not on its text
    assert f"{EXIT_OUTDATED})" in scripts(workflow)[outdated]
    matrix = index_of(workflow, "tests/matrix.py --releases")
    pull_request = index_of(workflow, "gh pr create")
    assert rebase < matrix < pull_request
    pr_script = scripts(workflow)[pull_request]
    assert "git add pyproject.toml COMPATIBILITY.md README.md docs/serving.md" in pr_script
    assert '--body-file "$SUMMARY"' in pr_script
    # the documented install commands move with the pin (tests/unit/test_docs.py), before the commit
    documented = index_of(workflow, "keras==")
    assert rebase < documented < pull_request and "PREVIOUS" in scripts(workflow)[documented]
    assert "--summary" in scripts(workflow)[rebase]
    issue = scripts(workflow)[index_of(workflow, "gh issue create")]
    assert "gh issue list --label" in issue and "gh issue edit" in issue  # one issue, updated
    by_name = {step.get("name"): step for step in steps(workflow)}
    assert by_name["pull request"]["if"] == "steps.rebase.outputs.exit_code == '0'"
    assert '"5"' in by_name["issue"]["if"]  # drift opens the issue


def test_nightly_watch_publishes_nothing() -> None:
    workflow = load("nightly-watch.yml")
    assert workflow["on"]["schedule"] and "workflow_dispatch" in workflow["on"]
    assert workflow["on"]["schedule"] != load("release-watch.yml")["on"]["schedule"]
    assert workflow["permissions"] == {"contents": "read", "issues": "write"}
    outdated = index_of(workflow, "forkgen outdated --distribution keras-nightly")
    rebase = index_of(workflow, "forkgen rebase --latest --distribution keras-nightly")
    assert outdated < rebase
    text = "\n".join(scripts(workflow))
    for publishing in ("gh pr", "git push", "git commit", "forkgen publish", "twine"):
        assert publishing not in text
    assert "GITHUB_STEP_SUMMARY" in text and "gh issue create" in text and "gh issue list --label" in text


def test_nightly_watch_runs_the_nightly_session_on_the_newest_nightly() -> None:
    """The scheduled run of `nox -s nightly` (every push runs it on the pinned nightly) takes the
    newest keras-nightly."""
    workflow = load("nightly-watch.yml")
    [step] = [s for s in steps(workflow) if "nox -s nightly" in s.get("run", "")]
    assert step["env"]["FORKGEN_NIGHTLY_VERSION"] == "latest"
