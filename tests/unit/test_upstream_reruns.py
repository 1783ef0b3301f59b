"""tests/upstream/keras_upstream_plugin.py: its rerun selection and its per-test seeds.

`forkgen compare-tests --suspects` writes the keys of the would-be regressions from JUnit XML;
the plugin must select exactly those tests again (FORKGEN_RERUN_TESTS) from pytest's items.
A real pytest loads the plugin and runs a synthetic test module twice: everything, then only
the chosen keys. A stand-in `keras` package records the seeds the plugin sets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

from forkgen.verify import read_junit

PLUGIN_DIR = Path(__file__).resolve().parents[1] / "upstream"

TESTS = '''
import pytest

class TestLayer:
    def test_plain(self):
        pass

    @pytest.mark.parametrize("equation", ["btd,df->btf", "ab/c", "x y"])
    def test_param(self, equation):
        pass

def test_function():
    pass

@pytest.mark.parametrize("n", [1, 2])
def test_numbers(n):
    pass
'''

#: Just what the plugin imports from Keras; set_random_seed appends `seed` to SEEDS_FILE.
FAKE_KERAS = {
    "keras/__init__.py": "from keras import utils\n",
    "keras/utils.py": (
        "import os\n"
        "def set_random_seed(seed):\n"
        "    with open(os.environ['SEEDS_FILE'], 'a') as f:\n"
        "        f.write(f'{os.environ[\"PYTEST_CURRENT_TEST\"].rsplit(\" (\", 1)[0]} {seed}\\n')\n"
    ),
    "keras/src/__init__.py": "",
    "keras/src/backend.py": "def backend():\n    return 'torch'\n",
}


def project(tmp_path: Path) -> None:
    for name, text in {"pkg/layer_test.py": TESTS, **{f"site/{k}": v for k, v in FAKE_KERAS.items()}}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)


def run(tmp_path: Path, xml: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    command = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "keras_upstream_plugin", *args]
    return subprocess.run(
        [sys.executable, *command, str(tmp_path / "pkg"), f"--junitxml={xml}"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
        env={
            **os.environ, "SEEDS_FILE": str(tmp_path / "seeds.txt"),
            "PYTHONPATH": os.pathsep.join([str(PLUGIN_DIR), str(tmp_path / "site"), *sys.path]), **env,
        },
    )


def seeds(tmp_path: Path) -> dict[str, int]:
    lines = (tmp_path / "seeds.txt").read_text().splitlines()
    (tmp_path / "seeds.txt").unlink()
    return {test: int(seed) for test, seed in (line.rsplit(" ", 1) for line in lines)}


def test_the_rerun_selects_exactly_the_suspects(tmp_path: Path) -> None:
    project(tmp_path)
    first = run(tmp_path, tmp_path / "all.xml")
    assert first.returncode == 0, first.stdout + first.stderr
    keys = sorted(read_junit(tmp_path / "all.xml"))
    assert len(keys) == 7
    chosen = [k for k in keys if "btd,df->btf" in k or "ab/c" in k or k.endswith("test_numbers[2]") or k.endswith("test_plain")]
    assert len(chosen) == 4
    listing = tmp_path / "suspects.txt"
    listing.write_text("".join(f"{k}\n" for k in chosen) + "gone.T::test_removed\n")
    second = run(tmp_path, tmp_path / "rerun.xml", FORKGEN_RERUN_TESTS=str(listing))
    assert second.returncode == 0, second.stdout + second.stderr
    assert sorted(read_junit(tmp_path / "rerun.xml")) == chosen
    assert "3 deselected" in second.stdout


def test_without_the_listing_nothing_is_deselected(tmp_path: Path) -> None:
    project(tmp_path)
    result = run(tmp_path, tmp_path / "all.xml", FORKGEN_RERUN_TESTS="")
    assert result.returncode == 0 and "deselected" not in result.stdout
    assert len(read_junit(tmp_path / "all.xml")) == 7


def test_every_test_is_seeded_from_its_own_id_whatever_runs_before_it(tmp_path: Path) -> None:
    project(tmp_path)
    assert run(tmp_path, tmp_path / "a.xml").returncode == 0
    forward = seeds(tmp_path)
    assert len(forward) == 7 and len(set(forward.values())) == 7
    assert all(seed == zlib.crc32(test.encode()) & 0x7FFFFFFF for test, seed in forward.items()), json.dumps(forward)
    # Another order, another subset: each test still gets its own seed.
    assert run(tmp_path, tmp_path / "b.xml", "-k", "numbers or param", "-p", "no:randomly").returncode == 0
    backward = seeds(tmp_path)
    assert len(backward) == 5 and all(forward[test] == seed for test, seed in backward.items())


def test_the_collected_listing_names_the_tests_as_their_junit_results_do(tmp_path: Path) -> None:
    project(tmp_path)
    listing = tmp_path / "collected.txt"
    collected = run(tmp_path, tmp_path / "none.xml", "--co", FORKGEN_COLLECTED=str(listing))
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert run(tmp_path, tmp_path / "all.xml").returncode == 0
    keys = listing.read_text().splitlines()
    assert len(keys) == 7 and sorted(keys) == sorted(read_junit(tmp_path / "all.xml"))
    # What the fork-first comparison reruns upstream: a listing of collected keys selects them.
    chosen = tmp_path / "chosen.txt"
    chosen.write_text("\n".join(keys[:3]) + "\n")
    assert run(tmp_path, tmp_path / "some.xml", FORKGEN_RERUN_TESTS=str(chosen)).returncode == 0
    assert sorted(read_junit(tmp_path / "some.xml")) == sorted(keys[:3])
