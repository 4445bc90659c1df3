"""imageref.py and --allowed-images: references normalized as the runtimes resolve them, patterns matched per
component (security review L5)."""

from __future__ import annotations

import re

import pytest
from dtr_operator import imageref
from dtr_operator import settings as cfg

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize("ref, normalized", [
    ("busybox", "docker.io/library/busybox:latest"),
    ("busybox:1.36", "docker.io/library/busybox:1.36"),
    ("distml/trainer:0.1.0", "docker.io/distml/trainer:0.1.0"),
    ("docker.io/distml/trainer:0.1.0", "docker.io/distml/trainer:0.1.0"),
    ("index.docker.io/distml/trainer:0.1.0", "docker.io/distml/trainer:0.1.0"),
    ("docker.io/busybox", "docker.io/library/busybox:latest"),
    ("ghcr.io/o/dtr-trainer", "ghcr.io/o/dtr-trainer:latest"),
    (f"ghcr.io/o/dtr-trainer@{DIGEST}", f"ghcr.io/o/dtr-trainer@{DIGEST}"),
    (f"ghcr.io/o/dtr-trainer:1@{DIGEST}", f"ghcr.io/o/dtr-trainer:1@{DIGEST}"),
    ("localhost:5000/a/b_c.d-e:v1.2", "localhost:5000/a/b_c.d-e:v1.2"),
    ("localhost/x", "localhost/x:latest"),
    ("[::1]:5000/x:1", "[::1]:5000/x:1"),
])  # fmt: skip
def test_references_are_normalized_as_the_runtimes_resolve_them(ref, normalized):
    assert imageref.normalize(ref) == normalized


@pytest.mark.parametrize("ref", [
    "", " busybox", "busybox ", "distml/trainer:1\nx", "distml/Trainer:1", "a//b", "/a", "a/", "x:", "x@sha256:abc",
    "x:-1", "a_b.c/x", "x:" + "t" * 129, "r.example.com/" + "a" * 250, "-x",
])  # fmt: skip
def test_invalid_references_have_no_normal_form(ref):
    assert imageref.normalize(ref) is None


@pytest.mark.parametrize("pattern, ref, admitted", [
    ("distml/trainer:*", "docker.io/distml/trainer:0.2.0", True),
    ("docker.io/distml/trainer:*", "distml/trainer:0.2.0", True),
    ("distml/trainer:*", "distml/trainer", True),  # :latest
    ("distml/trainer:*", f"distml/trainer@{DIGEST}", False),  # a tag pattern is not a digest pattern
    ("distml/trainer@sha256:*", f"distml/trainer@{DIGEST}", True),
    ("distml/trainer@sha256:*", "distml/trainer:1", False),
    ("registry.example.com/ml/*", "registry.example.com/ml/trainer:2", True),
    ("registry.example.com/ml/*", "registry.example.com/ml/team-b/secret:1", False),  # * never crosses /
    ("registry.example.com/ml/*/*", "registry.example.com/ml/team-b/secret:1", True),
    ("registry.local*", "registry.local.attacker.io/x", False),  # a host is never a prefix
    ("registry.local/*", "registry.local.attacker.io/x", False),
    ("distml/trainer:*", "evil.example.com/distml/trainer:1", False),
    ("distml/trainer:*", "distml/trainer:1\nx", False),
    ("busybox", "busybox:latest", True),
    ("busybox", "busybox:1", False),
    ("*", "evil.example.com/x:1", False),
    ("distml/trainer:0.?.0", "distml/trainer:0.2.0", True),
])  # fmt: skip
def test_patterns_match_normalized_references_per_component(pattern, ref, admitted):
    assert imageref.matches(pattern, ref) is admitted


@pytest.mark.parametrize("pattern", ["a b/*", "bad/Tr*:*", "x@sha256", "x:*:*", "*/"])
def test_a_pattern_that_can_match_no_reference_stops_the_operator(pattern):
    assert imageref.normalize_pattern(pattern) is None
    with pytest.raises(cfg.SettingsError, match=re.escape(f"DTR_ALLOWED_IMAGES: {pattern!r}")):
        cfg.from_env({"DTR_ALLOWED_IMAGES": f"distml/trainer:*,{pattern}"})


def test_the_default_image_is_allowed_under_either_spelling():
    unqualified = cfg.Settings(trainer_image="distml/trainer:0.1.0")
    assert unqualified.image_refusal("docker.io/distml/trainer:0.1.0") is None
    qualified = cfg.Settings(trainer_image="docker.io/distml/trainer:0.1.0")
    assert qualified.image_refusal("distml/trainer:0.1.0") is None
    assert qualified.image_refusal("distml/trainer:0.2.0") is not None


def test_an_invalid_image_is_refused_with_its_text_quoted():
    refusal = cfg.Settings(allowed_images=("distml/trainer:*",)).image_refusal("distml/trainer:1\nx")
    assert refusal is not None and "'distml/trainer:1\\nx' is not a valid image reference" in refusal
    assert "--allowed-images" in refusal
