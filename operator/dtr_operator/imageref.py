"""Container image references, normalized, and the operator's allow-list patterns matched against them. Pure.

A reference follows the distribution grammar (github.com/distribution/reference, reference.go and
normalize.go): `[registry[:port]/]path[:tag][@algorithm:hex]`. It is normalized as the container runtimes
resolve it, so that `distml/trainer:1` and `docker.io/distml/trainer:1` are one image: no registry means
`docker.io`, a one-component path on docker.io gains `library/`, no tag and no digest means `:latest`.

A pattern is normalized the same way and matched against the whole normalized reference, where `*` and `?`
never cross `/` (`registry.example.com/ml/*` admits `ml/trainer:2`, not `ml/team-b/secret:1`), and the
registry is always a whole component (`registry.local*` is a path on docker.io, so it never admits
`registry.local.attacker.io/x`).
"""

from __future__ import annotations

import re

DEFAULT_REGISTRY = "docker.io"
LEGACY_DEFAULT_REGISTRY = "index.docker.io"  # docker reads it as docker.io
OFFICIAL_PREFIX = "library/"
DEFAULT_TAG = "latest"
MAX_NAME = 255  # registry and path together (reference.NameTotalLengthMax)

_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_PATH = rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REGISTRY = re.compile(rf"localhost(?::[0-9]+)?|{_DOMAIN}")
_REMOTE = re.compile(rf"(?P<path>{_PATH})(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?")
_GLOB = re.compile(r"[*?]")
_GLOB_STAND_IN = "0" * 32  # what a glob stands for when a pattern is checked against the grammar


def _split_registry(ref: str) -> tuple[str | None, str]:
    """(registry or None, the rest): the first component is a registry when it looks like a host (a '.', a ':',
    an upper-case letter or localhost), as docker's normalize.go splitDockerDomain decides."""
    first, slash, rest = ref.partition("/")
    if slash and (first == "localhost" or "." in first or ":" in first or first != first.lower()):
        return first, rest
    return None, ref


def _qualified(registry: str | None, rest: str) -> str:
    registry = DEFAULT_REGISTRY if registry in (None, LEGACY_DEFAULT_REGISTRY) else registry
    if registry == DEFAULT_REGISTRY and "/" not in rest:
        rest = OFFICIAL_PREFIX + rest
    return f"{registry}/{rest}"


def _last_component(text: str) -> str:
    return text.rsplit("/", 1)[-1]


def normalize(ref: str) -> str | None:
    """The fully qualified reference (`docker.io/library/busybox:latest`), or None when ref is not a valid one
    (whitespace, upper case in the path, an empty component, a malformed registry, tag or digest ...)."""
    registry, rest = _split_registry(ref)
    remote = _REMOTE.fullmatch(rest)
    if remote is None or (registry is not None and _REGISTRY.fullmatch(registry) is None):
        return None
    if len(registry or DEFAULT_REGISTRY) + 1 + len(remote["path"]) > MAX_NAME:
        return None
    if remote["tag"] is None and remote["digest"] is None:
        rest = f"{rest}:{DEFAULT_TAG}"
    return _qualified(registry, rest)


def normalize_pattern(pattern: str) -> str | None:
    """The pattern qualified like a reference (`distml/trainer:*` -> `docker.io/distml/trainer:*`), or None when
    it cannot match any valid reference. A pattern without a tag, a digest or a glob in its last component
    names the `latest` tag, as the reference would."""
    if normalize(_GLOB.sub(_GLOB_STAND_IN, pattern)) is None:
        return None
    registry, rest = _split_registry(pattern)
    last = _last_component(rest)
    if not (":" in last or "@" in last or _GLOB.search(last)):
        rest = f"{rest}:{DEFAULT_TAG}"
    return _qualified(registry, rest)


def _regex(pattern: str) -> re.Pattern[str]:
    """The normalized pattern as a regex: `*` any run of characters but '/', `?` one; the rest literal."""
    parts = ("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in pattern)
    return re.compile("".join(parts))


def matches(pattern: str, ref: str) -> bool:
    """Whether the allow-list pattern admits the reference (both normalized here; an invalid one admits or is
    admitted by nothing)."""
    qualified, normalized = normalize_pattern(pattern), normalize(ref)
    if qualified is None or normalized is None:
        return False
    return _regex(qualified).fullmatch(normalized) is not None


def same_image(a: str, b: str) -> bool:
    """Whether two references name the same image once normalized (both valid)."""
    na = normalize(a)
    return na is not None and na == normalize(b)
