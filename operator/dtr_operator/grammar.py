"""The grammars of the names and values the API accepts, as full-match regexes (Kubernetes' own where the API has
one), and their words. Pure data: the field table (fields.py), the parser and the tools that check a name before it
reaches the cluster read them here.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

# Grammars, as full matches (Kubernetes' own where the API has one).
DNS1035_LABEL = r"[a-z]([-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
PVC_NAME = r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?"
MODEL_NAME = r"[a-z0-9]([-a-z0-9_.]*[a-z0-9])?"
NPZ_PATH = r"[A-Za-z0-9._/-]+"
CODE_KEY = r"[-._a-zA-Z0-9]+\.py"  # a ConfigMap key ('.', '..' are not) that is a Python file's name
PY_MODULE = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
HTTPS_URL = r"https://[^\s/?#@]+/[^\s?#]*[^\s/?#](\?[^\s#]*)?"  # a host (no user:password@) and a file name
SHA256_HEX = r"[0-9a-f]{64}"
METRIC_NAME = r"[A-Za-z_][A-Za-z0-9_]*"  # as Keras names a metric (mae, auc, top_k_categorical_accuracy)
# An object store's endpoint (spec.objectStore.endpoint): scheme://host[:port], nothing else (no path, no user:pass@).
ENDPOINT = r"https?://([a-z0-9]([-a-z0-9.]*[a-z0-9])?|\[[0-9a-f:.]+\])(:[0-9]{1,5})?"
# An object in a bucket, or a prefix of many (spec.training.dataset, spec.export.storageUri): a bucket name as S3
# has them, then keys of letters, digits and '._=+-' joined by single '/'s.
S3_URI = r"s3://[a-z0-9][-a-z0-9.]{1,61}[a-z0-9](/[A-Za-z0-9._=+-]+)*/?"
S3_DOT_SEGMENT = r"/[.][.]?(/|$)"  # searched: a "." or ".." key segment (the scheme's "//" is followed by the bucket)
DOT_SEGMENT = r"(^|/)[.][.]?(/|$)"  # searched, not matched: a "." or ".." path segment
LABEL_KEY = rf"({DNS1123_SUBDOMAIN}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{{0,61}}[A-Za-z0-9])?"
LABEL_VALUE = r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
# Kubernetes' resource.Quantity.
_DECIMAL = r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
QUANTITY = rf"(\+|-)?{_DECIMAL}(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?{_DECIMAL}))?"
KEY_GRAMMAR = (
    "an optional DNS-subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or '.', starting and "
    "ending with a letter or digit"
)


def positive_quantity(value: str) -> bool:
    """A Kubernetes quantity greater than zero (500m, 2Gi)."""
    if re.fullmatch(QUANTITY, value) is None or value.startswith("-"):
        return False
    number = re.match(r"[+]?([0-9]*\.?[0-9]*)", value)
    return number is not None and any(c in "123456789" for c in number.group(1))


_BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}  # powers of 1024
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY = re.compile(r"([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?")


def quantity(value: str | int) -> Decimal | None:
    """A Kubernetes quantity's value (`100Gi`, `2G`, `1.5e9`, `500Mi`); None when it is not one."""
    match = _QUANTITY.fullmatch(str(value).strip())
    if match is None:
        return None
    number, suffix = Decimal(match.group(1)), match.group(2) or ""
    try:
        if suffix in _BINARY_SUFFIXES:
            return number * 1024 ** _BINARY_SUFFIXES[suffix]
        exponent = int(suffix[1:]) if len(suffix) > 1 else _DECIMAL_SUFFIXES[suffix]
        return number.scaleb(exponent)
    except (InvalidOperation, OverflowError):
        return None


def quantity_within(value: str, low: str, high: str) -> bool:
    """A Kubernetes quantity between low and high, both included (CEL's twin: quantity(self) compared)."""
    number, lo, hi = quantity(value), quantity(low), quantity(high)
    if re.fullmatch(QUANTITY, value) is None or number is None or lo is None or hi is None:
        return False
    return lo <= number <= hi


def relative_path(value: str) -> bool:
    """A path under a directory: no leading /, no . or .. segment."""
    return re.fullmatch(NPZ_PATH, value) is not None and not value.startswith("/") and not re.search(DOT_SEGMENT, value)


def s3_uri(value: str) -> bool:
    """An s3:// URI the API accepts: S3_URI, no . or .. segment (S3 keeps them literally; a reader would not)."""
    return re.fullmatch(S3_URI, value) is not None and not re.search(S3_DOT_SEGMENT, value)
