"""The copy program of dtr data put and dtr model get (copier.py): frames, names, trees sent and written,
each file's SHA-256 checked, and the program itself run as the transfer pod runs it (python -c BOOTSTRAP),
with this Python and with the trainer image's 3.9 when it is here."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dtr_client import copier, transfer
from dtr_client.copier import CopyError
from dtr_client.volume import PROGRAM

from support.local_exec import make_tree, written
from support.repo import REPO

TRAINER_PYTHON = Path(os.environ.get("DTR_TRAINER_PYTHON") or REPO / ".venv" / "trainer" / "bin" / "python")
PYTHONS = [sys.executable] + ([str(TRAINER_PYTHON)] if TRAINER_PYTHON.exists() else [])


def send_to(entries, root: Path, tamper=None) -> copier.TreeWriter:
    """Every frame of the tree through a decoder (in uneven pieces) into a TreeWriter at root."""
    writer, frames = copier.TreeWriter(str(root)), copier.Frames()
    stream = b"".join(copier.tree_frames(entries))
    if tamper:
        stream = tamper(stream)
    for start in range(0, len(stream), 7777):
        for kind, payload in frames.feed(stream[start : start + 7777]):
            writer.handle(kind, payload)
    return writer


def test_frames_come_out_whole_however_the_bytes_are_cut():
    data = copier.frame(b"F", b"a/b") + copier.json_frame(b"Z", {"files": 1}) + copier.frame(b"C", b"")
    frames = copier.Frames()
    got = [f for i in range(len(data)) for f in frames.feed(data[i : i + 1])]
    assert got == [(b"F", b"a/b"), (b"Z", b'{"files": 1}'), (b"C", b"")]
    with pytest.raises(CopyError, match="not a copy stream"):
        copier.Frames().feed(b"C" + (copier.MAX_PAYLOAD + 1).to_bytes(4, "big"))


@pytest.mark.parametrize("name", ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a/.", "a\0b"])
def test_names_that_could_leave_the_root_are_refused(name):
    with pytest.raises(CopyError, match="not a plain relative path"):
        copier.name_parts(name)


def test_inside_the_root_only(tmp_path):
    root = tmp_path / "volume"
    root.mkdir()
    assert copier.inside(str(root), str(root)) == ""
    assert copier.inside(str(root), f"{root}/data/x") == "data/x"
    for outside in (str(tmp_path), f"{root}/../other", "relative/path"):
        with pytest.raises(CopyError, match="is not under"):
            copier.inside(str(root), outside)
    (root / "escape").symlink_to(tmp_path)
    with pytest.raises(CopyError, match="is not under"):
        copier.inside(str(root), f"{root}/escape/x")


def test_directories_on_the_way_must_be_real_directories(tmp_path):
    (tmp_path / "outside").mkdir()
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "link").symlink_to(tmp_path / "outside")
    (tmp_path / "root" / "file").write_text("x")
    assert copier.make_dirs(str(tmp_path / "root"), "new/deeper") == str(tmp_path / "root" / "new" / "deeper")
    for blocked in ("link/x", "file/x"):
        with pytest.raises(CopyError, match="exists and is not a directory"):
            copier.make_dirs(str(tmp_path / "root"), blocked)
    assert not list((tmp_path / "outside").iterdir())


def test_a_tree_arrives_byte_for_byte_with_every_digest_checked(tmp_path):
    source, target = tmp_path / "src", tmp_path / "dst"
    source.mkdir()
    target.mkdir()
    files = make_tree(source)
    entries = copier.walk(str(source), "src")
    assert [name for _, name, _ in entries][:3] == ["src", "src/a", "src/big.bin"], "directories before their files"
    assert copier.totals(entries) == {"files": 4, "bytes": sum(map(len, files.values()))}
    writer = send_to(entries, target)
    assert writer.done
    assert written(target / "src") == files
    assert (target / "src" / "a" / "empty-dir").is_dir()
    assert writer.account["files"] == {f"src/{n}": hashlib.sha256(c).hexdigest() for n, c in files.items()}
    assert not [p for p in target.rglob(f"*{copier.PARTIAL}*")], "no temporary file left"


def test_a_directorys_contents_are_sent_without_its_name_and_a_file_needs_one(tmp_path):
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "saved_model.pb").write_bytes(b"pb")
    assert [n for _, n, _ in copier.walk(str(tmp_path / "v"), "")] == ["saved_model.pb"]
    assert copier.walk(str(tmp_path / "v" / "saved_model.pb"), "m.pb") == [
        (copier.FILE, "m.pb", str(tmp_path / "v" / "saved_model.pb"))]
    with pytest.raises(CopyError, match="is a file, not a directory"):
        copier.walk(str(tmp_path / "v" / "saved_model.pb"), "")
    with pytest.raises(CopyError, match="no such file or directory"):
        copier.walk(str(tmp_path / "missing"), "missing")


def test_symlinks_in_a_sent_tree_are_refused_by_name(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "link").symlink_to("/etc/passwd")
    with pytest.raises(CopyError, match="link is not a regular file or a directory"):
        copier.walk(str(tmp_path / "d"), "d")


def test_a_damaged_file_is_an_error_naming_both_digests_and_leaves_no_partial_file(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    (source / "f.bin").write_bytes(b"\x01" * 1000)
    good = hashlib.sha256(b"\x01" * 1000).hexdigest()
    bad = hashlib.sha256(b"\x01" * 999 + b"\x02").hexdigest()

    def flip_last_byte_of_the_file(stream: bytes) -> bytes:
        at = stream.index(b"\x01" * 1000) + 999
        return stream[:at] + b"\x02" + stream[at + 1 :]

    (tmp_path / "dst").mkdir()
    receiver = copier.TreeWriter(str(tmp_path / "dst"))
    stream = flip_last_byte_of_the_file(b"".join(copier.tree_frames(copier.walk(str(source), "src"))))
    with pytest.raises(CopyError, match=f"SHA-256 mismatch for src/f.bin: sent {good}, written {bad}"):
        for kind, payload in copier.Frames().feed(stream):
            receiver.handle(kind, payload)
    receiver.abort()
    assert written(tmp_path / "dst") == {}, "neither the file nor its temporary copy"


def test_a_tree_cut_short_or_padded_is_not_done(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    (source / "f").write_bytes(b"abc")
    frames = list(copier.tree_frames(copier.walk(str(source), "src")))
    (tmp_path / "dst").mkdir()
    writer, decoder = copier.TreeWriter(str(tmp_path / "dst")), copier.Frames()
    for kind, payload in decoder.feed(b"".join(frames[:-1])):
        writer.handle(kind, payload)
    assert not writer.done
    with pytest.raises(CopyError, match="the tree ended incomplete"):
        writer.handle(copier.DONE, json.dumps({"files": 2, "bytes": 3}).encode())
    with pytest.raises(CopyError, match="unexpected frame"):
        writer.handle(b"?", b"")


def run_program(python: str, op: str, root: Path, target: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    """The copy program as the pod runs it: `python -c BOOTSTRAP ...`, its text first on stdin."""
    argv = transfer.command(PROGRAM, op, target)
    assert argv[:3] == ["python", "-c", transfer.BOOTSTRAP]
    args = [str(root) if a == transfer.layout.MOUNT_PATH else a for a in argv[3:]]
    args[-1] = str(root / "heartbeat")  # the pod's scratch dir
    return subprocess.run([python, "-c", transfer.BOOTSTRAP, *args], input=PROGRAM + stdin, capture_output=True,
                          timeout=60, check=False)  # fmt: skip


def account_of(out: bytes, kind: bytes) -> dict:
    [(got, payload)] = copier.Frames().feed(out)
    assert got == kind
    return json.loads(payload)


@pytest.mark.parametrize("python", PYTHONS)
def test_the_program_in_the_pod_receives_sends_and_lists(python, tmp_path):
    volume, source = tmp_path / "volume", tmp_path / "src"
    volume.mkdir()
    source.mkdir()
    files = make_tree(source)
    sent: dict[str, str] = {}
    tree = b"".join(copier.tree_frames(copier.walk(str(source), "src"), digests=sent))

    put = run_program(python, "receive", volume, f"{volume}/data/sets", tree)
    assert put.returncode == 0, put.stderr.decode()
    assert account_of(put.stdout, copier.ACCOUNT) == {"files": sent, "bytes": sum(map(len, files.values()))}
    assert written(volume / "data" / "sets" / "src") == files
    assert (volume / "heartbeat").exists(), "touched for the pod's idle process"

    listed = run_program(python, "list", volume, f"{volume}/data/sets/src")
    assert account_of(listed.stdout, copier.LISTING) == {"exists": True, "names": ["a"]}
    assert account_of(run_program(python, "list", volume, f"{volume}/nothing").stdout, copier.LISTING) == {
        "exists": False, "names": []}

    got = run_program(python, "send", volume, f"{volume}/data/sets/src")
    assert got.returncode == 0, got.stderr.decode()
    (tmp_path / "back").mkdir()
    writer = copier.TreeWriter(str(tmp_path / "back"))
    for kind, payload in copier.Frames().feed(got.stdout):
        writer.handle(kind, payload)
    assert writer.done and written(tmp_path / "back") == files


@pytest.mark.parametrize("python", PYTHONS)
def test_the_program_says_what_is_wrong_in_one_line_and_exits_3(python, tmp_path):
    volume = tmp_path / "volume"
    volume.mkdir()
    outside = run_program(python, "send", volume, str(tmp_path))
    assert outside.returncode == copier.FAILED
    assert outside.stderr.decode().strip() == f"error: {tmp_path} is not under {volume}"
    missing = run_program(python, "send", volume, f"{volume}/models/m/9")
    assert missing.stderr.decode().strip().endswith("9: no such file or directory")
    cut = run_program(python, "receive", volume, f"{volume}/data", copier.json_frame(copier.TREE, {"bytes": 1}))
    assert cut.returncode == copier.FAILED
    assert cut.stderr.decode().strip() == "error: the stream ended before the tree was complete"


def test_a_damaged_program_is_refused_before_it_runs(tmp_path):
    argv = transfer.command(PROGRAM, "list", "/mnt/x")
    proc = subprocess.run([sys.executable, "-c", transfer.BOOTSTRAP, *argv[3:]],
                          input=PROGRAM.replace(b"CHUNK = ", b"CHUNK= "), capture_output=True, check=False)  # fmt: skip
    assert proc.returncode == copier.FAILED
    assert proc.stderr.decode().strip() == "error: the copy program arrived damaged"
