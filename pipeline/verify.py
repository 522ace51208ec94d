"""`build.py verify IMAGE_REF --key PUBKEY`: is this pushed image the one that was proven, for the line
its tag names, recently enough? What it accepts, one run's statements read through the bounded registry
client and judged here, and its exit codes: docs/supply-chain.md ("Verifying a self-built image"); what
each refusal stops: its "Threats to signed proof" table.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from common.rules import STALE_AFTER_DAYS
from pipeline import attest, push, referrers, registry
from pipeline.errors import NotVerified, RegistryDataRefused, RegistryUnreachable, UsageError
from pipeline.labels import VALIDATION as VALIDATION_LABEL
from pipeline.signed_statements import Benchmark, Provenance, Signed, TestResult, Vulns, read_statement
from pipeline.statements import GPU_TESTS, IMAGE_KINDS, INDEX_KINDS, TIME_FORMAT

SKEW = dt.timedelta(minutes=5)  # how far ahead of this host's clock a signing time may be
DEFAULT_MAX_AGE = STALE_AFTER_DAYS  # days: a proof older than this is refused, as advisory data this old is stale


@dataclass(frozen=True)
class Policy:
    """What the caller asks of the proof beyond its signatures."""

    require_gpu: bool = False
    max_age_days: int = DEFAULT_MAX_AGE
    expect_line: str | None = None
    now: dt.datetime = dataclasses.field(default_factory=lambda: dt.datetime.now(dt.UTC))


@dataclass(frozen=True)
class RunSet:
    """The statements of the run that decides, one per kind."""

    run: str
    signed_at: dt.datetime
    by_kind: dict[str, Signed]

    def __getitem__(self, kind: str):
        return self.by_kind[kind].record


@dataclass(frozen=True)
class Keys:
    """The public keys a statement may be signed with: one, or the old and the new during a rotation."""

    keys: tuple

    def named(self, keyids: set[str]):
        """The key among these that an envelope names, or None."""
        return next((k for k in self.keys if k.keyid in keyids), None)

    def __str__(self) -> str:
        return " or ".join(f"{k.keyid[:16]}…" for k in self.keys)


@dataclass
class Read:
    """What the registry holds about one digest: the statements one of the keys verifies, how many envelopes
    there were, the key ids the others name, and why envelopes that name a key did not verify."""

    signed: list[Signed]
    count: int = 0
    others: set[str] = dataclasses.field(default_factory=set)
    unverified: list[str] = dataclasses.field(default_factory=list)


def deciding_run(signed: list[Signed], kinds: tuple[str, ...], label: str) -> RunSet:
    """The newest statement of each kind by its signed time; all of one run, and that run complete."""
    newest: dict[str, Signed] = {}
    for stmt in signed:
        held = newest.get(stmt.kind)
        if held is None or stmt.signed_at > held.signed_at:
            newest[stmt.kind] = stmt
        elif stmt.signed_at == held.signed_at and stmt.run != held.run:
            raise NotVerified(
                f"{label}: two runs ({held.run}, {stmt.run}) signed a {stmt.kind} statement at the same second; "
                "which is newer cannot be told: sign the image again"
            )
    missing = [k for k in kinds if k not in newest]
    if missing:
        found = sorted({s.run for s in signed})
        raise NotVerified(f"{label}: incomplete: no signed {', '.join(missing)} statement (runs found: {', '.join(found)})")
    runs = {newest[k].run for k in kinds}
    if len(runs) > 1:
        said = ", ".join(f"{k} from run {newest[k].run} ({newest[k].signed_at:%Y-%m-%d %H:%M:%S})" for k in kinds)
        raise NotVerified(f"{label}: statements of different runs are mixed, the newest being {said}; sign the image again")
    run = runs.pop()
    in_run = [s for s in signed if s.run == run]
    if len({s.kind for s in in_run}) != len(in_run):
        raise NotVerified(f"{label}: run {run} signed one kind twice; sign the image again")
    if len({s.signed_at for s in in_run}) != 1:  # the signer stamps one time per run
        raise NotVerified(f"{label}: run {run}'s statements carry different signing times: not one signing; sign the image again")
    return RunSet(run, in_run[0].signed_at, {k: newest[k] for k in kinds})


def judge_result(test: TestResult, require_gpu: bool, label: str, index: bool = False) -> None:
    """PASSED with tests listed; WARNED only for GPU checks that did not run. With --require-gpu, every GPU
    check is listed as passed (an index's children are judged one by one)."""
    if test.result == "PASSED" and not test.passed:
        raise NotVerified(f"{label}: the signed test result is PASSED but lists no passed test: not a proof")
    if test.result == "PASSED" and require_gpu and not index:
        missing = [t for t in GPU_TESTS if t not in test.passed]
        if missing:
            raise NotVerified(f"{label}: --require-gpu: the signed test result lists {', '.join(missing)} as not passed")
    if test.result == "PASSED":
        return
    if test.result == "WARNED":
        others = [t for t in test.warned if t not in GPU_TESTS and t.split("/", 1)[-1] not in GPU_TESTS]
        if others:
            raise NotVerified(f"{label}: the test result is WARNED for {', '.join(others)}, which are not GPU checks")
        if require_gpu:
            raise NotVerified(
                f"{label}: proven on the CPU only (WARNED: {', '.join(test.warned)} did not run), and --require-gpu was given"
            )
        return
    raise NotVerified(f"{label}: the signed test result is {test.result}: failed {', '.join(test.failed) or 'unknown tests'}")


def judge_age(runset: RunSet, policy: Policy, label: str) -> None:
    """Signed within --max-age days, and not in the future (beyond a clock skew of SKEW)."""
    if runset.signed_at > policy.now + SKEW:
        ahead = runset.signed_at - policy.now
        raise NotVerified(
            f"{label}: signed {runset.signed_at:%Y-%m-%d %H:%M:%S} UTC, {ahead.days} days {ahead.seconds // 60} min ahead "
            f"of this host's clock (allowed skew {SKEW.seconds // 60} min): the signer's clock was wrong; sign it again"
        )
    age = policy.now - runset.signed_at
    if age > dt.timedelta(days=policy.max_age_days):
        raise NotVerified(
            f"{label}: proven {age.days} days ago (signed {runset.signed_at:%Y-%m-%d}), past --max-age {policy.max_age_days}; "
            "prove it again on your host (`proof`) and sign it (`build.py sign`), or pull a newer image"
        )


def judge_line(prov: Provenance, ref: registry.ImageRef, policy: Policy, label: str) -> None:
    """The tag asked about is one the signed provenance names; the line is the one expected."""
    if not ref.is_digest and ref.reference not in prov.tags:
        raise NotVerified(
            f"{label}: the tag {ref.reference} is not one this image was pushed under (its signed provenance names line "
            f"{prov.line}, tags {', '.join(prov.tags) or 'none'}): a proven image moved under another tag"
        )
    if policy.expect_line is not None and prov.line != policy.expect_line:
        raise NotVerified(
            f"{label}: the signed provenance names line {prov.line}, not the {policy.expect_line} --expect-line asks for"
        )


def lapsed(vulns: Vulns, today: dt.date) -> list[str]:
    """Advisories the signed audit accepted only until a date that has passed."""
    return [f"{ident} (accepted until {expires})" for ident, expires in vulns.accepted_until if expires < today.isoformat()]


@dataclass(frozen=True)
class Verifier:
    """What every check of one command reads with: the registry's client, the keys, the caller's policy."""

    client: registry.Registry
    key: Keys
    policy: Policy

    def read_signed(self, digest: str, label: str) -> Read:
        """Every envelope about `digest`, one at a time. One that names a key but does not verify (junk anyone
        can attach) is set aside, not fatal: it adds nothing, and the run it would have belonged to is then
        incomplete, which is refused with its reason."""
        found = Read([])
        signed, others = found.signed, found.others
        for data in referrers.envelopes_about(self.client, digest):  # one at a time: only its Signed record is kept
            found.count += 1
            envelope = registry.parse_json(data, f"{label}: a statement envelope")
            del data
            if not isinstance(envelope, dict):
                raise RegistryDataRefused(f"{label}: a statement envelope is not a JSON object")
            names = attest.signers_of(envelope)
            opener = self.key.named(names)
            if opener is None:
                others |= {k[:16] for k in names}
                continue
            try:
                payload = attest.open_envelope(envelope, opener, f"{label}: a statement")
            except NotVerified as err:
                found.unverified.append(str(err))
                continue
            stmt = read_statement(registry.parse_json(payload, f"{label}: a signed statement"), f"{label}: a signed statement")
            if stmt.digest != digest:
                raise NotVerified(
                    f"{label}: the signed {stmt.kind} statement is about {stmt.digest}, not {digest}: copied from another image"
                )
            signed.append(stmt)
        return found

    def signed_statements(
        self, digest: str, kinds: tuple[str, ...], label: str, unsigned_why: Callable[[], str] = lambda: ""
    ) -> RunSet:
        found = self.read_signed(digest, label)
        if found.count == 0:
            raise NotVerified(
                f"{label}: no signed statements are attached to {digest}: "
                + (unsigned_why() or "pushed unsigned, or not by this pipeline")
            )
        if not found.signed and not found.unverified:
            raise NotVerified(
                f"{label}: none of its {found.count} statements is signed by key {self.key} "
                f"(they name key {', '.join(sorted(found.others)) or 'none'}…): the wrong public key, or signed by someone else"
            )
        try:
            return deciding_run(found.signed, kinds, label)
        except NotVerified as err:
            if not found.unverified:
                raise
            raise NotVerified(
                f"{err}; {len(found.unverified)} naming the key did not verify, e.g. {found.unverified[0]}"
            ) from None

    def judge(self, runset: RunSet, label: str, asked: registry.ImageRef | None, index: bool = False) -> None:
        """The signed result, its age, and (where `asked` names this image or index itself) its line."""
        judge_result(runset["test-result"], self.policy.require_gpu, label, index)
        judge_age(runset, self.policy, label)
        if asked is not None:
            judge_line(runset["provenance"], asked, self.policy, label)

    def check_image(self, digest: str, body: bytes, label: str, asked: registry.ImageRef | None) -> dict:
        """One image's statements judged; `asked`: the reference the user gave, when it names this image itself
        (an index's children are reached through the index, whose provenance answers for the tag)."""
        config = registry.config_digest(body, label)

        def forged_labels() -> str:
            """An image whose labels say it passed, with nothing signed behind them: relabelled or foreign."""
            try:
                image_config = registry.as_dict(self.client.blob(config), "the image config")
            except RegistryDataRefused:
                return ""
            labels = image_config.get("config", {}).get("Labels") if isinstance(image_config.get("config"), dict) else None
            if isinstance(labels, dict) and labels.get(VALIDATION_LABEL) == "passed":
                return f"its label {VALIDATION_LABEL}=passed is backed by no signature (labels can be written by anyone): a relabelled or foreign image"
            return ""

        runset = self.signed_statements(digest, IMAGE_KINDS, label, forged_labels)
        test: TestResult = runset["test-result"]
        self.judge(runset, label, asked)
        gone = lapsed(runset["vulns"], self.policy.now.date())
        if gone:
            raise NotVerified(f"{label}: accepted advisories have lapsed: {', '.join(gone)}; rebuild it with a fresh audit")
        if test.image_id != config:
            raise NotVerified(
                f"{label}: the proof ran in image {str(test.image_id)[:19]}…, but {digest[:19]}… is image {config[:19]}…"
            )
        return summary(digest, runset)

    def check_index(self, digest: str, label: str, asked: registry.ImageRef | None) -> dict:
        """An index's own statements judged (its children are checked one by one, as images)."""
        runset = self.signed_statements(digest, INDEX_KINDS, label)
        self.judge(runset, label, asked, index=True)
        return summary(digest, runset)

    def judge_rollback(self, record: dict, ref: registry.ImageRef, index: bool = False) -> None:
        """A moving tag names the newest signed build of its line: refuse it when an immutable tag of the same
        line, flavor, architecture and torch build with a later date names another digest (an image, or for a
        multi-arch line's `index` another index) whose statements verify and were signed later (the tag was
        moved back to an older proven digest). A registry that hides the newer tag is bounded by --max-age."""
        own = record["provenance"]["tags"][0] if record["provenance"]["tags"] else ""
        if ref.reference == own:
            return  # asked by its immutable tag: nothing newer to compare with
        for tag in newer_builds(own, line_tags(self.client, own)):
            found = self.client.manifest(tag)
            if found is None or found[2] == record["digest"] or (found[1] in registry.INDEXES) != index:
                continue
            label = f"{ref} (newer {tag})"
            try:
                other = self.check_index(found[2], label, None) if index else self.check_image(found[2], found[0], label, None)
            except NotVerified:
                continue  # not a newer *signed* build
            if other["signed_at"] > record["signed_at"]:  # TIME_FORMAT is fixed-width UTC: as text, as in time
                raise NotVerified(
                    f"{ref}: names {record['digest'][:19]}… (signed {record['signed_at']}), but {tag} names a newer "
                    f"signed build of the line, {found[2][:19]}… (signed {other['signed_at']}): the tag was moved back; "
                    "pull by the newer tag, or ask by digest if the older one is wanted"
                )


def line_tags(client: registry.Registry, own: str) -> list[str]:
    """The repository's tags from `own`'s line and date on, none for a tag not immutable: the list read from
    there (`last`; zot refuses a `last` that is no tag: then from the first), page after page while the registry
    links a next page (Debian's docker-registry sends all at once) and the pages have not passed the line. A
    registry that pages without honouring `last`, or more than MAX_TAG_PAGES pages, is refused: a newer build
    of the line could lie past what was read."""
    mine = push.IMMUTABLE.match(own)
    if mine is None:
        return []
    line = f"{mine['stem']}-"
    after = start = f"{line}{mine['date']}"
    found: list[str] = []
    for _ in range(registry.MAX_TAG_PAGES):
        got = client.tags(after=after)
        if got is None and after == start:
            after, got = "", client.tags()
        page, more = got or ([], False)
        found += page
        if not more or not page or (page[-1] > line and not page[-1].startswith(line)):
            return found  # the list's end, or past the line: the pages come in lexical order
        if after and page[0] <= after:
            raise NotVerified(
                f"{client.ref.name}: the registry pages its tag list but ignores `last` (sent {after}, it began at "
                f"{page[0]}): the line's newer builds cannot be read; ask by the immutable tag or the digest"
            )
        after = page[-1]
    raise NotVerified(
        f"{client.ref.name}: the registry lists more than {registry.MAX_TAG_PAGES * registry.MAX_TAGS:,} tags from "
        f"{start} on, and verify reads no further (a newer build of the line could lie past them); ask by the "
        "immutable tag or the digest"
    )


NEWER_CHECKED = 5  # newer immutable tags of the line verified at most, newest first


def newer_builds(own: str, tags: list[str]) -> list[str]:
    """The immutable tags of `own`'s line (its torch build, flavor and architecture) dated no earlier than it,
    newest first, at most NEWER_CHECKED; none when `own` is not an immutable tag."""
    mine = push.IMMUTABLE.match(own)
    if mine is None:
        return []
    same = [
        m
        for m in map(push.IMMUTABLE.match, tags)
        if m
        and (m["stem"], m["flavor"], m["arch"]) == (mine["stem"], mine["flavor"], mine["arch"])
        and m["date"] >= mine["date"]
        and m.string != own
    ]
    newest = sorted({m.string: m for m in same}.values(), key=lambda m: m["date"], reverse=True)
    return [m.string for m in newest][:NEWER_CHECKED]


def verify(
    image_ref: str, key_paths: Path | list[Path], policy: Policy | None = None, timeout: float = registry.DEFAULT_DEADLINE
) -> dict:
    """Everything checked, as a record (verified: True); NotVerified at the first thing that does not hold."""
    policy = policy or Policy()
    if policy.max_age_days < 1:
        raise UsageError(f"--max-age {policy.max_age_days}: give a number of days, at least 1")
    if timeout <= 0:
        raise UsageError(f"--timeout {timeout:g}: give a number of seconds above 0")
    key = Keys(tuple(attest.load_public_key(path) for path in ([key_paths] if isinstance(key_paths, Path) else key_paths)))
    try:
        client, ref, (body, media, digest) = registry.open_image(image_ref, timeout)
    except RegistryUnreachable as err:
        if not (registry.parse_ref(image_ref).host == "docker.io" and not image_ref.startswith("docker.io/")):
            raise
        raise RegistryUnreachable(  # `proven-torch:2.9-cu128`: a local image's name, read as Docker Hub's
            f"{err}; verify reads a registry, never this host's images: push it first (`build.py --cuda X --push "
            "--registry HOST:PORT --sign-key KEY`) and verify HOST:PORT/proven-torch:TAG"
        ) from None
    checker = Verifier(client, key, policy)
    images: list[dict] = []
    record: dict = {
        "verified": True,
        "ref": str(ref),
        "digest": digest,
        "keyids": [k.keyid for k in key.keys],
        "require_gpu": policy.require_gpu,
        "images": images,
    }
    if media in registry.INDEXES:
        label = f"{ref} (index)"
        record["index"] = checker.check_index(digest, label, ref)
        vouched = set(record["index"]["test_result"]["vouched"])
        for name, child in registry.index_images(body, f"{ref}'s index"):
            child_found = client.manifest(child["digest"])
            if child_found is None:
                raise NotVerified(f"{ref}: the index names {name} {child['digest'][:19]}…, which the registry does not have")
            if child["digest"] not in vouched:
                raise NotVerified(f"{ref}: the index names {name} {child['digest'][:19]}…, which its signed test result does not")
            images.append({"platform": name, **checker.check_image(child["digest"], child_found[0], f"{ref} {name}", None)})
        if not images:
            raise NotVerified(f"{ref}: the index lists no image to verify")
        if not ref.is_digest:
            checker.judge_rollback(record["index"], ref, index=True)
    else:
        images.append(checker.check_image(digest, body, str(ref), ref))
        if not ref.is_digest:
            checker.judge_rollback(images[0], ref)
    return record


def summary(digest: str, runset: RunSet) -> dict:
    """What the screen and --json show, from the verified statements only."""
    test: TestResult = runset["test-result"]
    out: dict = {
        "digest": digest,
        "run": runset.run,
        "run_name": runset.by_kind["test-result"].run_name,
        "signed_at": runset.signed_at.strftime(TIME_FORMAT),
        "statements": sorted(runset.by_kind),
        "test_result": dataclasses.asdict(test),
        "provenance": dataclasses.asdict(runset["provenance"]),
    }
    if "benchmark" in runset.by_kind:
        out["benchmark"] = dataclasses.asdict(runset["benchmark"])
    if "vex" in runset.by_kind:
        out["accepted_advisories"] = [dataclasses.asdict(a) for a in runset["vex"]]
    if "vulns" in runset.by_kind:
        out["advisory_data"] = runset["vulns"].data_date
        out["findings"] = [dict(zip(("id", "severity", "package", "accepted"), f, strict=True)) for f in runset["vulns"].findings]
    if "sbom" in runset.by_kind:
        out["sbom_components"], out["packages"] = len(runset["sbom"]), list(runset["sbom"])
    return out


def screen(record: dict) -> list[str]:
    """One screen: what was proven, where, when, from which revision, the figures, the accepted advisories."""
    keys = " or ".join(f"{k[:16]}…" for k in record["keyids"])
    lines = [f"VERIFIED {record['ref']}", f"  digest      {record['digest']}", f"  signed by   key {keys}"]
    if "index" in record:
        idx = record["index"]
        lines.append(f"  index       {idx['test_result']['result']}; {len(record['images'])} image(s), each checked below")
    for image in record["images"]:
        lines += [""] + _image_lines(image)
    return lines


def _image_lines(image: dict) -> list[str]:
    test, prov = TestResult(**image["test_result"]), Provenance(**image["provenance"])
    bench = Benchmark(**image["benchmark"]) if image.get("benchmark") else None
    where = "GPU" if bench and bench.device.startswith("cuda") else "CPU"
    result = test.result + (
        f": on the {where} only, not run: {', '.join(test.warned)}" if test.result == "WARNED" else f" on the {where}"
    )
    gpu = f"; GPU {bench.gpu_model}, driver {bench.driver}" if bench and bench.gpu_model else ""
    lines = [
        f"  {image.get('platform', 'image')}  {image['digest']}",
        f"    proof       {result}",
        f"    where       {test.validated_on}; host CPU {(bench.host_cpu if bench else None) or 'unknown'}{gpu}",
        f"    image       {test.image_id} (the image the proof ran in)",
        f"    built       {prov.started} to {prov.finished}; signed {image['signed_at']} (run {image['run']}"
        + (f", {image['run_name']})" if image.get("run_name") else ")"),
        f"    from        line {prov.line}, revision {prov.revision}: {' '.join(prov.command)}",
        f"    tags        {', '.join(prov.tags)}",
        f"    statements  {', '.join(image['statements'])}; SBOM of {image.get('sbom_components', '?')} components",
    ]
    if bench:
        secs = None if bench.seconds_to_target is None else round(bench.seconds_to_target, 1)
        steps = f"{bench.steps_to_target:,.0f}" if bench.steps_to_target else "?"
        sps = f"{bench.steps_per_second:,.0f}" if bench.steps_per_second else "?"
        lines.append(
            f"    figures     {bench.environment} to {bench.target_return} in {steps} steps, {secs} s, {sps} steps/s "
            f"on {bench.device} (CUDA {bench.cuda})"
        )
    accepted = image.get("accepted_advisories") or []
    lines.append(f"    advisories  {len(accepted)} accepted (advisory data as of {image.get('advisory_data')})")
    lines += [f"      {a['id']} in {a['package']}: {a['why']}" for a in accepted]
    return lines


def verify_and_show(image_ref: str, key_paths: list[Path], policy: Policy, timeout: float, as_json: bool = False) -> list[str]:
    record = verify(image_ref, key_paths, policy, timeout)
    return [json.dumps(record, indent=2)] if as_json else screen(record)
