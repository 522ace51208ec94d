"""`build.py sign` binds what it signs to what was checked. A report folder that changes while it signs:
each record is read once and the statements are made from the bytes that were checked, so a record swapped
right after its check is not what is signed. The swap is played by a file that answers its first reader with
the stamped record and every later one with a forged record (a named pipe fed by a thread: the attacker who
can write the report folder). And a report folder edited before it signs: the line and platform it names
must be the stamped record's. All against a crafted registry holding the image stamped with the genuine
record's hash."""

from __future__ import annotations

import errno
import json
import os
import re
import threading
import time
from pathlib import Path

import pytest

from pipeline import registry, statements
from pipeline.signing import SignRequest, sign_command
from tests.crafted_registry import REPO, Server
from tests.records import LINE, run_folder, stamp_label, validation, validation_files

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]  # a reader left waiting on the pipe fails, never hangs

TAG = LINE  # the default line: the records' own


class Swapped:
    """`path` made a named pipe: the first open reads `first`, every later one `later`; `opened` counts them."""

    def __init__(self, path: Path, first: bytes, later: bytes):
        self.path, self.first, self.later = path, first, later
        self.opened = 0
        self.stop = threading.Event()
        path.unlink()
        os.mkfifo(path)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while not self.stop.is_set():
            try:
                with open(self.path, "wb") as pipe:  # waits for a reader
                    if self.stop.is_set():
                        return
                    self.opened += 1
                    pipe.write(self.first if self.opened == 1 else self.later)
            except BrokenPipeError:  # that reader stopped early
                pass
            while self.reader_still_open():  # the next writer would add to this reader's bytes
                time.sleep(0.005)

    def reader_still_open(self) -> bool:
        try:
            os.close(os.open(self.path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError as err:
            if err.errno == errno.ENXIO:
                return False
            raise
        return True

    def close(self) -> None:
        self.stop.set()
        deadline = time.monotonic() + 5
        while self.thread.is_alive() and time.monotonic() < deadline:
            reader = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)  # lets a writer waiting for a reader go on
            self.thread.join(0.05)
            os.close(reader)


def pushed_build(server: Server, folder: Path) -> tuple[Path, str]:
    """A CPU-only build pushed to the crafted registry, stamped with its validation record's hash: its
    report.json and digest."""
    genuine = validation(gpu=False)
    validation_files(folder, record=genuine)
    config = server.blob(json.dumps({"config": {"Labels": stamp_label(folder, TAG)}}).encode())
    digest, _ = server.manifest(
        {"schemaVersion": 2, "mediaType": registry.OCI_MANIFEST, "config": {"digest": config}, "layers": []}, TAG
    )
    return run_folder(folder, ref=f"{server.host}/{REPO}", digest=digest, image_id=config, record=genuine), digest


def prepare(server: Server, report: Path, digest: str, out: Path) -> dict[str, dict]:
    """`build.py sign --prepare OUT` without a key: the statements it would sign, by kind."""
    ref = registry.parse_ref(f"{server.host}/{REPO}@{digest}")
    sign_command(SignRequest(ref=ref, report=report, key=None, prepare=out))
    prepared = json.loads((out / "statements.json").read_text())["statements"]
    return {str(statements.kind_of(s["predicateType"])): s["predicate"] for s in prepared}


def forged_gpu_pass(stamped: bytes) -> bytes:
    """The stamped CPU-only record turned into a GPU pass; its SBOM entry kept, so the SBOM check passes."""
    record = json.loads(stamped)
    keep = {k: record[k] for k in ("platform", "sbom", "ran_in")}
    return json.dumps({**validation(gpu=True), **keep}).encode()


def test_a_validation_record_swapped_after_its_hash_was_checked_is_not_signed(server, tmp_path):
    report, digest = pushed_build(server, tmp_path / "run")
    path = report.parent / "validation.json"
    stamped = path.read_bytes()
    swap = Swapped(path, stamped, forged_gpu_pass(stamped))
    try:
        made = prepare(server, report, digest, tmp_path / "prepared")
    finally:
        swap.close()
    assert swap.opened == 1  # hashed, parsed and signed from one read
    assert json.loads((tmp_path / "prepared" / "validation.json").read_text()) == json.loads(stamped)
    assert made["test-result"] == prepare_plain(server, tmp_path, stamped)


def prepare_plain(server: Server, tmp_path: Path, stamped: bytes) -> dict:
    """The test result the same build gives with no swap (the control)."""
    report, digest = pushed_build(server, tmp_path / "control")
    assert (report.parent / "validation.json").read_bytes() == stamped
    return prepare(server, report, digest, tmp_path / "control-prepared")["test-result"]


def test_run_facts_swapped_after_the_tag_check_are_not_signed(server, tmp_path):
    """facts.json is bound by checks, not a hash (the tags against the stamped version and the line): another
    line's tag added after those checks must not reach the signed provenance."""
    report, digest = pushed_build(server, tmp_path / "run")
    path = report.parent / "facts.json"
    genuine = path.read_bytes()
    facts = json.loads(genuine)
    forged = json.dumps({**facts, "tags": [*facts["tags"], "0.1-cu100"]}).encode()
    swap = Swapped(path, genuine, forged)
    try:
        made = prepare(server, report, digest, tmp_path / "prepared")
    finally:
        swap.close()
    assert swap.opened == 1
    assert "0.1-cu100" not in json.dumps(made["provenance"])
    assert json.loads((tmp_path / "prepared" / "facts.json").read_text())["tags"] == facts["tags"]


def test_the_push_refuses_an_sbom_changed_since_its_validation_record_named_it(tmp_path):
    """The push signs its run's own facts and validation record as it holds them; the SBOM is the one file it
    reads back, and only the one the record names by hash."""
    from pipeline.errors import NotVerified
    from pipeline.records import Facts, Signable

    report = run_folder(tmp_path, ref="h/r", digest="sha256:" + "a" * 64, image_id="sha256:" + "b" * 64)
    facts, record = Facts.load(report.parent / "facts.json"), json.loads((report.parent / "validation.json").read_text())
    assert Signable.of_run(tmp_path, facts, record).sbom["components"]
    (tmp_path / "sbom.cdx.json").write_text(json.dumps({"bomFormat": "CycloneDX", "components": []}))
    with pytest.raises(NotVerified, match="is not the SBOM the stamped validation record names"):
        Signable.of_run(tmp_path, facts, record)


def test_a_run_file_that_is_a_folder_a_link_or_missing_is_one_line_exit_2(tmp_path):
    """`sign --proof DIR` (proof --out wrote DIR/proof.json) is a likely slip: one line, never a traceback."""
    from pipeline.errors import UsageError
    from pipeline.records import load

    (tmp_path / "folder.json").mkdir()
    (tmp_path / "link.json").symlink_to(tmp_path / "folder.json")
    cases = {"folder.json": "cannot read the proof record (Is a directory)", "link.json": "is a symbolic link"}
    for name, said in {**cases, "missing.json": "cannot read the proof record (No such file"}.items():
        with pytest.raises(UsageError, match=re.escape(said)) as err:
            load(tmp_path / name, "proof record")
        assert err.value.exit_code == 2 and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("edit", "proof_line"),
    [
        ({"line": "0.2-cu100", "tags": [TAG, "0.2-cu100"]}, "0.2-cu100"),  # another line, its proof written to match
        ({"platform": "linux/arm64", "tags": [f"{TAG}-arm64"]}, TAG),  # another architecture
    ],
)
def test_a_report_edited_to_name_another_line_or_platform_than_the_stamped_record_is_refused(server, tmp_path, edit, proof_line):
    """The report and facts are the caller's files, and so is a later proof: only the stamped validation
    record says which line and platform ran. Before, an image of one line signed as another line's (or as arm64)."""
    from pipeline.errors import NotVerified
    from tests.records import proof_folder

    report, digest = pushed_build(server, tmp_path / "run")
    facts_path, data = report.parent / "facts.json", json.loads(report.read_text())
    facts = json.loads(facts_path.read_text())
    facts_path.write_text(json.dumps({**facts, **edit}))
    report.write_text(json.dumps({**data, "variant": edit.get("line", data["variant"])}))
    proof = proof_folder(tmp_path / "proof", facts["stamped_image_id"], gpu=True, line=proof_line)
    ref = registry.parse_ref(f"{server.host}/{REPO}@{digest}")
    request = SignRequest(ref=ref, report=report, key=None, proof=proof, require_gpu=True, prepare=tmp_path / "out")
    with pytest.raises(NotVerified, match=f"was validated as line {TAG} on linux/amd64 .*, but the report and facts name"):
        sign_command(request)
    assert not (tmp_path / "out").exists()
