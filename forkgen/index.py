"""A small package-index client: finds and downloads sdists without running anything from them.

It honours pip's index configuration (`pip config list`: index-url, extra-index-url,
find-links, no-index, trusted-host, cert, timeout), reads PEP 691 JSON and PEP 503 HTML
project pages (over https, http or file://) and find-links directories, and streams a file
to disk while hashing it. Unlike `pip download`, it never builds metadata, so no `setup.py`
or PEP 517 hook of the archive runs before forkgen has checked its sha256.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import os
import posixpath
import ssl
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from html.parser import HTMLParser
from http.client import HTTPResponse
from pathlib import Path
from typing import NamedTuple
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from packaging.utils import InvalidSdistFilename, canonicalize_name, parse_sdist_filename
from packaging.version import Version

import forkgen
from forkgen.cmd import log, run
from forkgen.errors import FetchError

PYPI = "https://pypi.org/simple"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"
_ACCEPT = f"{JSON_TYPE}, text/html;q=0.1"
#: The sections of `pip config list` that `pip download` reads, lowest precedence first.
_SECTIONS = ("global", "download", ":env:")
_ALIASES = {"default-timeout": "timeout", "pypi-url": "index-url"}
_TRUE = {"1", "y", "yes", "t", "true", "on"}
_HINT = (
    "check the version, and the indexes pip is configured with: `python -m pip config list` "
    "(PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS, PIP_NO_INDEX, PIP_CONFIG_FILE)"
)


@dataclass(frozen=True)
class IndexConfig:
    """The part of pip's configuration that says where packages come from and how to reach them."""

    index_url: str = PYPI
    extra_index_urls: tuple[str, ...] = ()
    #: Directories, HTML files or URLs of flat HTML pages.
    find_links: tuple[str, ...] = ()
    no_index: bool = False
    #: Hosts (`host` or `host:port`) whose https certificate is not checked.
    trusted_hosts: tuple[str, ...] = ()
    #: CA bundle (a file or a directory) for https; None for the system's.
    cert: str | None = None
    timeout: float = 15.0

    def indexes(self) -> tuple[str, ...]:
        """The index URLs to ask, in order (none under no-index)."""
        return () if self.no_index else (self.index_url, *self.extra_index_urls)


class Candidate(NamedTuple):
    """An sdist some index or find-links location serves."""

    filename: str
    version: Version
    url: str
    #: The sha256 the index advertises for the file, if any.
    sha256: str | None
    yanked: bool


class _Link(NamedTuple):
    url: str
    sha256: str | None
    yanked: bool


def _key(name: str) -> str:
    key = name.strip().lower().replace("_", "-")
    return _ALIASES.get(key, key)


def _unquote(raw: str) -> str:
    try:
        value = ast.literal_eval(raw.strip())
    except (ValueError, SyntaxError):
        return raw.strip()
    return value if isinstance(value, str) else raw.strip()


def _config(settings: Mapping[str, str]) -> IndexConfig:
    try:
        timeout = float(settings.get("timeout", "15"))
    except ValueError:
        raise FetchError(
            f"pip's configuration: timeout {settings['timeout']!r} is not a number", hint=_HINT
        ) from None
    return IndexConfig(
        index_url=settings.get("index-url", "").strip() or PYPI,
        extra_index_urls=tuple(settings.get("extra-index-url", "").split()),
        find_links=tuple(settings.get("find-links", "").split()),
        no_index=settings.get("no-index", "").strip().lower() in _TRUE,
        trusted_hosts=tuple(settings.get("trusted-host", "").split()),
        cert=settings.get("cert", "").strip() or None,
        timeout=timeout,
    )


def parse_pip_config(output: str) -> IndexConfig:
    """The index configuration in the output of `pip config list` (lines `section.key='value'`).

    As in `pip download`: `:env:` (the PIP_* variables) wins over the `download` section,
    which wins over `global`; other sections and other lines are ignored.
    """
    levels: dict[str, dict[str, str]] = {section: {} for section in _SECTIONS}
    for line in output.splitlines():
        name, equals, raw = line.partition("=")
        section, dot, key = name.strip().partition(".")
        if equals and dot and section in levels:
            levels[section][_key(key)] = _unquote(raw)
    return _config({key: value for section in _SECTIONS for key, value in levels[section].items()})


def pip_index_config() -> IndexConfig:
    """pip's effective index configuration: its files (or PIP_CONFIG_FILE) and PIP_* variables."""
    result = run([sys.executable, "-m", "pip", "config", "list"], capture=True)
    if result.returncode == 0:
        return parse_pip_config(result.stdout)
    # pip's own message may quote the configuration, credentials included: not repeated here.
    log(f"warning: `pip config list` failed (exit {result.returncode}); using the PIP_* environment variables only")
    return _config({_key(k[4:]): v for k, v in os.environ.items() if k.startswith("PIP_")})


def _split_credentials(url: str) -> tuple[str, str]:
    """(user:password, the URL without them)."""
    parts = urlsplit(url)
    userinfo, _, host = parts.netloc.rpartition("@")
    return userinfo, urlunsplit(parts._replace(netloc=host))


def _redact(url: str) -> str:
    """`url` with any credentials in it replaced by `***`, fit for a log or an error message."""
    userinfo, bare = _split_credentials(url)
    if not userinfo:
        return url
    parts = urlsplit(bare)
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc))


def _authorization(url: str, config: IndexConfig) -> tuple[str, str | None]:
    """The URL to request, and its basic auth: from the URL, or from a configured URL of its host."""
    userinfo, bare = _split_credentials(url)
    if not userinfo:
        host = urlsplit(bare).netloc
        configured = map(_split_credentials, (*config.indexes(), *config.find_links))
        userinfo = next((info for info, other in configured if urlsplit(other).netloc == host and info), "")
    if not userinfo:
        return bare, None
    user, _, password = userinfo.partition(":")
    token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()
    return bare, f"Basic {token}"


def _tls(url: str, config: IndexConfig) -> ssl.SSLContext:
    parts = urlsplit(url)
    if parts.hostname in config.trusted_hosts or parts.netloc in config.trusted_hosts:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if config.cert is None:
        return ssl.create_default_context()
    directory = os.path.isdir(config.cert)
    try:
        return ssl.create_default_context(
            cafile=None if directory else config.cert, capath=config.cert if directory else None
        )
    except OSError as error:
        raise FetchError(f"pip's cert {config.cert} cannot be used: {error}", hint=_HINT) from None


def _secure(url: str, config: IndexConfig) -> bool:
    """pip's rule: plain http only to loopback and trusted hosts (https, file:// always)."""
    parts = urlsplit(url)
    if parts.scheme != "http":
        return True
    host = parts.hostname or ""
    loopback = host == "localhost" or host == "::1" or host.startswith("127.")
    return loopback or host in config.trusted_hosts or parts.netloc in config.trusted_hosts


def _local_path(location: str) -> Path | None:
    """The local file or directory `location` names (a path or a file:// URL), None for a URL."""
    if location.startswith("file:"):
        return Path(urllib.request.url2pathname(urlsplit(location).path))
    return None if "://" in location else Path(location).absolute()


@contextmanager
def _errors(what: str, url: str) -> Iterator[None]:
    """Turn network and file errors while doing `what` with `url` into a FetchError."""
    try:
        yield
    except urllib.error.HTTPError as error:
        hint = _HINT
        if error.code in (401, 403):
            hint = "check the user and password (or token) in the index URL: `python -m pip config list`"
        raise FetchError(f"cannot {what} {_redact(url)}: HTTP {error.code} {error.reason}", hint=hint) from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", None) or getattr(error, "strerror", None) or error
        raise FetchError(f"cannot {what} {_redact(url)}: {reason}", hint=_HINT) from None


def _get(url: str, config: IndexConfig, accept: str) -> HTTPResponse:
    """GET `url` with pip's TLS settings, timeout and credentials (raises urllib's errors)."""
    bare, authorization = _authorization(url, config)
    request = urllib.request.Request(
        bare, headers={"Accept": accept, "User-Agent": f"forkgen/{forkgen.__version__}"}
    )
    if authorization:  # not sent on to where a redirect points
        request.add_unredirected_header("Authorization", authorization)
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=_tls(bare, config)))
    response: HTTPResponse = opener.open(request, timeout=config.timeout)
    return response


def _read_page(url: str, config: IndexConfig) -> tuple[bytes, str, str] | None:
    """(body, content type, base URL) of the page at `url`; None when there is no such page.

    A local directory stands for the `index.html` in it.
    """
    path = _local_path(url)
    with _errors("read", url):
        if path is not None:
            page = path / "index.html" if path.is_dir() else path
            return (page.read_bytes(), "text/html", page.as_uri()) if page.is_file() else None
        try:
            response = _get(url, config, _ACCEPT)
        except urllib.error.HTTPError as error:
            error.close()
            if error.code in (404, 410):
                return None
            raise
        with response:
            return response.read(), response.headers.get("Content-Type", ""), response.geturl()


class _Anchors(HTMLParser):
    def __init__(self, base: str) -> None:
        super().__init__()
        self.base = base
        self.links: list[_Link] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        href = values.get("href")
        if tag == "base" and href:
            self.base = urljoin(self.base, href)
        elif tag == "a" and href:
            url, _, fragment = urljoin(self.base, href).partition("#")
            algorithm, _, digest = fragment.partition("=")
            self.links.append(_Link(url, digest if algorithm == "sha256" else None, "data-yanked" in values))


def _parse(body: bytes, content_type: str, base: str) -> list[_Link]:
    """The file links of a PEP 691 JSON or PEP 503 HTML page."""
    if not content_type.startswith(JSON_TYPE):
        parser = _Anchors(base)
        parser.feed(body.decode("utf-8", errors="replace"))
        parser.close()
        links = parser.links
    else:
        try:
            links = [
                _Link(
                    urljoin(base, str(f["url"])).partition("#")[0],
                    f.get("hashes", {}).get("sha256"),
                    f.get("yanked") not in (None, False),
                )
                for f in json.loads(body)["files"]
            ]
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise FetchError(f"{_redact(base)} is not a PEP 691 project page: {error!r}", hint=_HINT) from None
    return [link._replace(sha256=str(link.sha256).lower() if link.sha256 else None) for link in links]


def _links(location: str, config: IndexConfig, *, listing: bool) -> list[_Link]:
    """The links of a page; with `listing` (find-links), a local directory lists its files."""
    if not _secure(location, config):
        log(f"warning: ignoring {_redact(location)}: plain http to a host that is not trusted "
            "(as pip does; add it to pip's trusted-host to allow it)")
        return []
    path = _local_path(location)
    if listing and path is not None and path.is_dir():
        return [_Link(p.as_uri(), None, False) for p in sorted(path.iterdir()) if p.is_file()]
    page = _read_page(location, config)
    if page is None:
        log(f"  {_redact(location)}: not found")
        return []
    return _parse(*page)


def _candidate(project: str, link: _Link) -> Candidate | None:
    """`link` as an sdist of `project`, or None if it is not one.

    The canonical name must equal `project`, so the file name holds no path separator.
    """
    filename = unquote(posixpath.basename(urlsplit(link.url).path))
    if not filename.endswith(".tar.gz"):
        return None
    try:
        name, version = parse_sdist_filename(filename)
    except InvalidSdistFilename:
        return None
    if name != project:
        return None
    return Candidate(filename, version, link.url, link.sha256, link.yanked)


def _locations(project: str, config: IndexConfig) -> list[tuple[str, bool]]:
    """(page or find-links location, is find-links) in the order they are asked, each once."""
    pages = [(f"{index.rstrip('/')}/{project}/", False) for index in config.indexes()]
    return list(dict.fromkeys(pages + [(location, True) for location in config.find_links]))


def _where(project: str, config: IndexConfig) -> str:
    asked = ", ".join(_redact(location) for location, _ in _locations(project, config))
    return asked or "nowhere (no-index is set and there are no find-links)"


def candidates(distribution: str, config: IndexConfig) -> list[Candidate]:
    """Every sdist of `distribution` on the configured indexes and find-links, in their order."""
    project = canonicalize_name(distribution)
    found: list[Candidate] = []
    for location, listing in _locations(project, config):
        log(f"asking {_redact(location)} for the sdists of {project}")
        links = _links(location, config, listing=listing)
        found += [c for c in (_candidate(project, link) for link in links) if c is not None]
    return found


#: The distributions whose pre- and dev releases count as releases (keras-nightly publishes
#: only `.devN` versions); for every other one only final releases do.
PRERELEASE_DISTRIBUTIONS = frozenset({"keras-nightly"})


def latest_version(distribution: str, config: IndexConfig | None = None) -> str:
    """The newest version of `distribution` whose sdist the indexes serve, yanked ones aside.

    For keras-nightly the newest of all (its versions are `.devN` pre-releases); for any
    other distribution the newest final release: a `3.16.0rc1` is not a release to move a
    pin to. `config` defaults to pip's.
    """
    config = pip_index_config() if config is None else config
    project = canonicalize_name(distribution)
    versions = {c.version for c in candidates(distribution, config) if not c.yanked}
    if not versions:
        raise FetchError(f"found no sdist (.tar.gz) of {distribution} on {_where(project, config)}", hint=_HINT)
    if project in PRERELEASE_DISTRIBUTIONS:
        return str(max(versions))
    finals = {v for v in versions if not v.is_prerelease}
    if not finals:
        raise FetchError(
            f"found only pre-releases of {distribution} on {_where(project, config)} "
            f"(the newest: {max(versions)}); only keras-nightly's pre-releases are followed",
            hint="name the version to use it (--version / forkgen rebase VERSION)",
        )
    return str(max(finals))


def find_sdist(distribution: str, version: str, sha256: str | None, config: IndexConfig) -> Candidate:
    """The sdist of `distribution` `version` (a valid PEP 440 version) to download.

    Yanked files are used only when nothing else has that version (with a warning); among
    several files, one whose advertised sha256 is `sha256` is preferred.
    """
    wanted = Version(version)
    found = candidates(distribution, config)
    matching = [c for c in found if c.version == wanted]
    usable = [c for c in matching if not c.yanked]
    if matching and not usable:
        log(f"warning: {distribution} {version} is yanked; using it since exactly this version is asked for")
        usable = matching
    if not usable:
        newest = ", ".join(str(v) for v in sorted({c.version for c in found})[-5:])
        raise FetchError(
            f"found no sdist (.tar.gz) of {distribution}=={version} on "
            f"{_where(canonicalize_name(distribution), config)}"
            + (f" (the newest there: {newest})" if newest else ""),
            hint=_HINT,
        )
    return next((c for c in usable if sha256 is not None and c.sha256 == sha256), usable[0])


def download(candidate: Candidate, directory: Path, config: IndexConfig) -> tuple[Path, str]:
    """Stream `candidate` into a new temporary file in `directory`; return it and its sha256.

    The file is only written and hashed: nothing in it is unpacked or run here.
    """
    if not _secure(candidate.url, config):
        raise FetchError(
            f"refusing to download {_redact(candidate.url)}: plain http to a host that is not trusted",
            hint="serve the index over https, or add the host to pip's trusted-host",
        )
    log(f"downloading {candidate.filename} from {_redact(candidate.url)}")
    handle, name = tempfile.mkstemp(dir=directory, prefix=".download-", suffix=".part")
    temporary = Path(name)
    digest = hashlib.sha256()
    size = 0
    try:
        path = _local_path(candidate.url)
        with os.fdopen(handle, "wb") as out, _errors("download", candidate.url):
            with path.open("rb") if path is not None else _get(candidate.url, config, "*/*") as source:
                for block in iter(lambda: source.read(1 << 20), b""):
                    digest.update(block)
                    out.write(block)
                    size += len(block)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    log(f"downloaded {candidate.filename}: {size:,} bytes")
    return temporary, digest.hexdigest()
