"""forkgen's index client: pip's configuration, PEP 691/503 pages, find-links, auth, yanked files.

Every index here is local: an `http.server` on 127.0.0.1 or a directory (file://).
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forkgen import index
from forkgen.errors import FetchError
from forkgen.index import IndexConfig, find_sdist, latest_version, parse_pip_config
from tests.support.fake_index import JSON_TYPE, FakeIndex, File, keras_sdist, serve
from tests.support.synthetic import sha256

SDIST = keras_sdist("3.15.1")


def files(*names: str) -> list[File]:
    return [File(name, SDIST if name == "keras-3.15.1.tar.gz" else b"x") for name in names]


@pytest.fixture
def pip_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No pip configuration but what a test sets."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_TRUSTED_HOST"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def keras_index() -> Iterator[tuple[FakeIndex, str]]:
    fake = FakeIndex({"keras": [File("keras-3.15.1.tar.gz", SDIST)]})
    with serve(fake) as url:
        yield fake, url


# -- pip's configuration ---------------------------------------------------------------------


def test_no_configuration_means_pypi() -> None:
    assert parse_pip_config("") == IndexConfig(index_url="https://pypi.org/simple")


def test_environment_wins_over_download_over_global() -> None:
    output = "\n".join(
        [
            "global.index-url='https://global.example/simple'",
            "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'",
            "global.find-links='/opt/wheels'",
            "global.timeout='30'",
            "download.index-url='https://download.example/simple'",
            "install.index-url='https://install.example/simple'",
            "download.trusted-host='mirror.example  other.example:8443'",
            ":env:.default-timeout='180'",
            ":env:.find-links='/env/wheels\\n/more/wheels'",
            ":env:.cert='/etc/ssl/certs/ca-certificates.crt'",
            ":env:.no-index='yes'",
            "WARNING: Location 'file:///x/' is ignored: it is neither a file nor a directory.",
        ]
    )
    assert parse_pip_config(output) == IndexConfig(
        index_url="https://download.example/simple",
        extra_index_urls=("file:///opt/pypi/simple", "file:///opt/pypi-more/simple"),
        find_links=("/env/wheels", "/more/wheels"),
        no_index=True,
        trusted_hosts=("mirror.example", "other.example:8443"),
        cert="/etc/ssl/certs/ca-certificates.crt",
        timeout=180.0,
    )
    assert parse_pip_config(":env:.index-url='https://env.example/simple'\n" + output).index_url == (
        "https://env.example/simple"
    )
    assert not parse_pip_config("global.no-index='false'").no_index


def test_a_bad_timeout_is_a_fetch_error() -> None:
    with pytest.raises(FetchError, match="timeout 'soon'"):
        parse_pip_config("global.timeout='soon'")


def test_pip_config_list_honours_pip_config_file(pip_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "pip.conf"
    config.write_text(
        "[global]\nindex-url = https://global.example/simple\n"
        "[download]\nindex-url = https://download.example/simple\n"
        "extra-index-url =\n    https://one.example/simple\n    https://two.example/simple\n"
    )
    pip_env.setenv("PIP_CONFIG_FILE", str(config))
    found = index.pip_index_config()
    assert found.index_url == "https://download.example/simple"
    assert found.extra_index_urls == ("https://one.example/simple", "https://two.example/simple")
    pip_env.setenv("PIP_INDEX_URL", "https://user:secret@env.example/simple")
    assert index.pip_index_config().index_url == "https://user:secret@env.example/simple"


def test_without_pip_config_list_the_environment_is_used(
    pip_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(args, 1, "ERROR: index-url=https://u:secret@x/simple", "")

    pip_env.setattr(index, "run", broken)
    pip_env.setenv("PIP_INDEX_URL", "https://env.example/simple")
    pip_env.setenv("PIP_EXTRA_INDEX_URL", "https://a.example/simple https://b.example/simple")
    pip_env.setenv("PIP_DEFAULT_TIMEOUT", "7")
    found = index.pip_index_config()
    assert (found.index_url, found.extra_index_urls, found.timeout) == (
        "https://env.example/simple", ("https://a.example/simple", "https://b.example/simple"), 7.0
    )
    err = capsys.readouterr().err
    assert "warning: `pip config list` failed" in err
    assert "secret" not in err


# -- finding the sdist -----------------------------------------------------------------------


@pytest.mark.parametrize("serve_json", [True, False], ids=["pep691-json", "pep503-html"])
def test_json_and_html_pages_resolve_and_download(tmp_path: Path, serve_json: bool) -> None:
    fake = FakeIndex({"keras": files("keras-3.15.1.tar.gz", "keras-3.15.1-py3-none-any.whl", "keras-3.15.0.tar.gz")})
    fake.serve_json = serve_json
    with serve(fake) as url:
        candidate = find_sdist("Keras", "3.15.1", None, IndexConfig(index_url=url))
        path, digest = index.download(candidate, tmp_path, IndexConfig(index_url=url))
    assert candidate.filename == "keras-3.15.1.tar.gz"
    assert candidate.sha256 == digest == sha256(SDIST)
    assert path.parent == tmp_path and path.read_bytes() == SDIST
    page = next(r for r in fake.requests if r[0] == "/simple/keras/")
    assert page[1].startswith(JSON_TYPE) and "text/html" in page[1]


def test_extra_index_url_is_asked_after_the_index(keras_index: tuple[FakeIndex, str]) -> None:
    empty = FakeIndex({"other": files("other-1.0.tar.gz")})
    with serve(empty) as main_url:
        config = IndexConfig(index_url=main_url, extra_index_urls=(keras_index[1],))
        assert find_sdist("keras", "3.15.1", None, config).url.startswith(keras_index[1].removesuffix("simple"))
    assert [r[0] for r in empty.requests] == ["/simple/keras/"]


def test_find_links_directory_and_html_file(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "keras-3.15.1.tar.gz").write_bytes(SDIST)
    (wheels / "keras-3.15.1-py3-none-any.whl").write_bytes(b"x")
    (wheels / "keras_hub-3.15.1.tar.gz").write_bytes(b"x")
    found = find_sdist("keras", "3.15.1", None, IndexConfig(no_index=True, find_links=(str(wheels),)))
    assert found.url == (wheels / "keras-3.15.1.tar.gz").as_uri() and found.sha256 is None
    page = tmp_path / "links.html"
    page.write_text('<a href="wheels/keras-3.15.1.tar.gz#sha256=ABC">keras</a>')
    found = find_sdist("keras", "3.15.1", None, IndexConfig(no_index=True, find_links=(page.as_uri(),)))
    assert (found.url, found.sha256) == ((wheels / "keras-3.15.1.tar.gz").as_uri(), "abc")


def test_find_links_url_of_a_flat_page(keras_index: tuple[FakeIndex, str], tmp_path: Path) -> None:
    config = IndexConfig(no_index=True, find_links=(keras_index[1] + "/keras/",))
    candidate = find_sdist("keras", "3.15.1", None, config)
    assert index.download(candidate, tmp_path, config)[1] == sha256(SDIST)


def test_file_url_directory_index(tmp_path: Path) -> None:
    simple = FakeIndex({"keras": files("keras-3.15.1.tar.gz")}).write(tmp_path / "mirror")
    config = IndexConfig(index_url=simple.as_uri())
    candidate = find_sdist("keras", "3.15.1", None, config)
    assert candidate.url == (tmp_path / "mirror/files/keras-3.15.1.tar.gz").as_uri()
    assert candidate.sha256 == sha256(SDIST)
    assert index.download(candidate, tmp_path, config)[1] == sha256(SDIST)


def test_basic_auth_from_the_index_url(
    keras_index: tuple[FakeIndex, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake, url = keras_index
    fake.auth = ("alice", "s3cr:et")
    authed = url.replace("http://", "http://alice:s3cr%3Aet@")
    config = IndexConfig(index_url=authed)
    candidate = find_sdist("keras", "3.15.1", None, config)
    assert "alice" not in candidate.url  # the file's URL has none, its host's credentials apply
    assert index.download(candidate, tmp_path, config)[1] == sha256(SDIST)
    assert all(r[2].startswith("Basic ") for r in fake.requests)
    with pytest.raises(FetchError, match="HTTP 401") as caught:
        find_sdist("keras", "3.15.1", None, IndexConfig(index_url=authed.replace("s3cr%3Aet", "wrong")))
    assert "wrong" not in caught.value.message and "***@127.0.0.1" in caught.value.message
    assert "s3cr" not in capsys.readouterr().err


def test_yanked_files_are_used_only_when_nothing_else_matches(capsys: pytest.CaptureFixture[str]) -> None:
    yanked = FakeIndex({"keras": [File("keras-3.15.1.tar.gz", SDIST, yanked=True), File("keras-3.15.0.tar.gz", b"x")]})
    live = FakeIndex({"keras": [File("keras-3.15.1.tar.gz", SDIST)]})
    with serve(yanked) as yanked_url, serve(live) as live_url:
        only_yanked = IndexConfig(index_url=yanked_url)
        assert find_sdist("keras", "3.15.1", None, only_yanked).yanked
        assert "is yanked" in capsys.readouterr().err
        both = IndexConfig(index_url=yanked_url, extra_index_urls=(live_url,))
        assert not find_sdist("keras", "3.15.1", None, both).yanked
        assert latest_version("keras", only_yanked) == "3.15.0"
        yanked.serve_json = False  # the HTML page marks it with data-yanked
        assert latest_version("keras", only_yanked) == "3.15.0"


def test_the_advertised_pinned_sha256_is_preferred() -> None:
    other = FakeIndex({"keras": [File("keras-3.15.1.tar.gz", b"another file")]})
    with serve(other) as first, serve(FakeIndex({"keras": files("keras-3.15.1.tar.gz")})) as second:
        config = IndexConfig(index_url=first, extra_index_urls=(second,))
        assert find_sdist("keras", "3.15.1", None, config).url.startswith(first.removesuffix("simple"))
        assert find_sdist("keras", "3.15.1", sha256(SDIST), config).url.startswith(second.removesuffix("simple"))


@pytest.mark.parametrize(
    ("distribution", "names", "expected"),
    [
        ("keras", ["keras-3.9.0.tar.gz", "keras-3.15.1.tar.gz", "keras-3.14.0.tar.gz"], "3.15.1"),
        ("keras", ["keras-3.15.1.tar.gz", "keras-3.16.0rc1.tar.gz", "keras-3.16.0.dev5.tar.gz", "keras-3.17.0-py3-none-any.whl"], "3.15.1"),
        ("keras-nightly", ["keras_nightly-3.12.0.dev2025100703.tar.gz", "keras_nightly-3.13.0.dev2025110101.tar.gz", "keras-3.15.1.tar.gz"], "3.13.0.dev2025110101"),
    ],
    ids=["stable-only", "mixed", "dev-only"],
)
def test_latest_version(distribution: str, names: list[str], expected: str) -> None:
    with serve(FakeIndex({distribution: [File(n, b"x") for n in names]})) as url:
        assert latest_version(distribution, IndexConfig(index_url=url)) == expected


def test_latest_version_reads_pips_configuration(pip_env: pytest.MonkeyPatch, keras_index: tuple[FakeIndex, str]) -> None:
    pip_env.setenv("PIP_INDEX_URL", keras_index[1])
    assert latest_version("keras") == "3.15.1"


def test_no_sdist_is_a_fetch_error(keras_index: tuple[FakeIndex, str]) -> None:
    config = IndexConfig(index_url=keras_index[1])
    with pytest.raises(FetchError, match=r"found no sdist \(\.tar\.gz\) of keras==3\.99\.0 on http://127"):
        find_sdist("keras", "3.99.0", None, config)
    with pytest.raises(FetchError, match="found no sdist") as caught:  # a 404: the project is not there
        latest_version("keras-nightly", config)
    assert "pip config list" in caught.value.hint
    with pytest.raises(FetchError, match="nowhere"):
        latest_version("keras", IndexConfig(no_index=True))


def test_an_unreachable_index_is_a_fetch_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(FetchError, match=f"cannot read http://127.0.0.1:{port}/simple/keras/"):
        find_sdist("keras", "3.15.1", None, IndexConfig(index_url=f"http://127.0.0.1:{port}/simple", timeout=5))


def test_trusted_hosts_and_cert() -> None:
    trusted = IndexConfig(trusted_hosts=("mirror.example", "other.example:8443"))
    assert index._tls("https://mirror.example/simple", trusted).verify_mode == ssl.CERT_NONE
    assert index._tls("https://other.example:8443/simple", trusted).verify_mode == ssl.CERT_NONE
    assert index._tls("https://other.example/simple", trusted).verify_mode == ssl.CERT_REQUIRED
    with pytest.raises(FetchError, match="pip's cert /no/such/bundle.pem cannot be used"):
        index._tls("https://pypi.org/simple", IndexConfig(cert="/no/such/bundle.pem"))


def test_a_failed_download_leaves_no_file(keras_index: tuple[FakeIndex, str], tmp_path: Path) -> None:
    config = IndexConfig(index_url=keras_index[1])
    candidate = find_sdist("keras", "3.15.1", None, config)
    with pytest.raises(FetchError, match="cannot download .*HTTP 404"):
        index.download(candidate._replace(url=candidate.url + ".gone"), tmp_path, config)
    assert list(tmp_path.iterdir()) == []


def test_plain_http_only_to_loopback_and_trusted_hosts(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # As pip: an http index on another host is ignored (a man in the middle could serve anything).
    config = IndexConfig(index_url="http://mirror.example/simple", timeout=1)
    with pytest.raises(FetchError, match="found no sdist"):
        find_sdist("keras", "3.15.1", None, config)
    assert "ignoring http://mirror.example/simple/keras/: plain http" in capsys.readouterr().err
    assert index._secure("http://mirror.example/simple", IndexConfig(trusted_hosts=("mirror.example",)))
    assert index._secure("http://localhost:8080/simple", config) and index._secure("http://127.0.0.1/simple", config)
    candidate = index.Candidate("keras-3.15.1.tar.gz", index.Version("3.15.1"), "http://files.example/k.tar.gz", None, False)
    with pytest.raises(FetchError, match="refusing to download http://files.example/k.tar.gz"):
        index.download(candidate, tmp_path, config)
    assert list(tmp_path.iterdir()) == []
