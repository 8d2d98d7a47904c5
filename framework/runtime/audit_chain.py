"""The audit chain: how each record's hash is made, and how a whole log is checked.

Every record names the kind of chain it belongs to in ``chain``:

    sha256       hash = sha256(canonical JSON of every field but hash, chain and key_id); the
                 formula of logs written before records had a kind, so those still verify
    hmac-sha256  hash = HMAC-SHA256(key, canonical JSON of every field but hash), so chain and
                 key_id are covered too; ``key_id`` (the first 8 hex digits of
                 HMAC-SHA256(key, "ca-audit-key-id")) names the key without revealing it

The key comes from the variable ``ca.yaml`` ``audit.key_env`` names, read from the process
environment only: a key in ``.env`` sits beside the log, where whoever can rewrite the log can
read it. An unkeyed chain shows an edited, deleted or reordered record, but anyone who can write
the database can recompute the whole chain from any record on; a keyed chain also shows that,
unless the key leaked. Neither shows a truncated tail whose head row was rewritten too: keep
:attr:`VerifyResult.head_hash` elsewhere for that.

A chain switches at most once, from unkeyed to keyed (a project turning the key on later): the
first keyed record covers the hash of the last unkeyed one, so it pins every record before it.
It never switches back and keeps one key: an unkeyed record after a keyed one is a record
rewritten without the key, and :func:`check_tail` refuses to append one.
"""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path
from typing import Any, Literal

from framework.errors import UsageError
from framework.runtime.audit_store import GENESIS
from framework.spec.interpolate import load_dotenv
from framework.spec.project import AuditConfig

Chain = Literal["sha256", "hmac-sha256"]
"""The kind of chain a record belongs to."""

UNKEYED: Chain = "sha256"
KEYED: Chain = "hmac-sha256"
MIN_KEY_LENGTH = 16
_KEY_ID_MESSAGE = b"ca-audit-key-id"
_NEW_KEY = "python3 -c 'import secrets; print(secrets.token_hex(32))'"


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""One encoder for every record (``json.dumps`` makes a new one per call when given options)."""


def canonical_json(value: Any) -> str:
    """The one JSON text of a value that hashes are computed over."""
    return _CANONICAL.encode(value)


@dataclass(frozen=True)
class ChainKey:
    """The key of a keyed chain and the variable it came from (named in messages, never the key)."""

    secret: bytes = field(repr=False)
    env: str
    id: str = field(init=False)
    """First 8 hex digits of HMAC-SHA256(key, "ca-audit-key-id"): which key, not the key."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "id", hmac.new(self.secret, _KEY_ID_MESSAGE, sha256).hexdigest()[:8])


def chain_key(config: AuditConfig, root: Path, environ: Mapping[str, str] | None = None) -> ChainKey | None:
    """The key ``audit.key_env`` names, from the process environment; None when the chain is unkeyed."""
    name = config.key_env
    if name is None:
        return None
    value = (os.environ if environ is None else environ).get(name, "")
    if not value:
        if name in load_dotenv(root):
            raise UsageError(
                f"ca.yaml audit.key_env names {name!r}, which is set only in .env: the audit key must not be "
                "stored beside the log it protects (whoever can rewrite .ca/audit.db can read .env); "
                f"remove it from .env and export {name} in the environment ca runs in"
            )
        raise UsageError(
            f"ca.yaml audit.key_env names {name!r}, which is not set: export {name} with the audit chain's key "
            f"(a new one: {_NEW_KEY}), kept outside the project"
        )
    if len(value) < MIN_KEY_LENGTH:
        raise UsageError(
            f"{name} holds {len(value)} characters; an audit key needs at least {MIN_KEY_LENGTH} "
            f"(a new one: {_NEW_KEY})"
        )
    return ChainKey(value.encode("utf-8"), name)


def _hashed_text(fields: Mapping[str, Any], left_out: tuple[str, ...], data_text: str | None) -> bytes:
    """The canonical JSON of ``fields`` but ``left_out``, as UTF-8. ``data_text``: the canonical JSON
    of ``data``, which is spliced in rather than encoded again (the same text: the other fields are
    strings and numbers, so ``"data":null`` can only be the member itself, a quote inside a string
    being escaped)."""
    hashed = {k: v for k, v in fields.items() if k not in left_out}
    if data_text is None:
        return canonical_json(hashed).encode("utf-8")
    hashed["data"] = None
    return canonical_json(hashed).replace('"data":null', f'"data":{data_text}', 1).encode("utf-8")


def record_hash(fields: Mapping[str, Any], data_text: str | None = None) -> str:
    """The unkeyed hash: ``sha256`` of the canonical JSON of every field but hash, chain and key_id
    (``data_text``: ``data``'s canonical JSON, already made)."""
    return sha256(_hashed_text(fields, ("hash", "chain", "key_id"), data_text)).hexdigest()


def keyed_hash(fields: Mapping[str, Any], key: ChainKey, data_text: str | None = None) -> str:
    """The keyed hash: HMAC-SHA256 with ``key`` of the canonical JSON of every field but hash
    (``data_text``: ``data``'s canonical JSON, already made)."""
    return hmac.new(key.secret, _hashed_text(fields, ("hash",), data_text), sha256).hexdigest()


def check_tail(last: Mapping[str, Any] | None, key: ChainKey | None, where: str) -> None:
    """Refuse to append to a keyed chain without its key: such records would look like a rewrite."""
    if last is None or last["chain"] != KEYED:
        return  # an empty or unkeyed tail: either kind may follow (turning the key on later)
    if key is None:
        raise UsageError(
            f"the audit chain in {where} is keyed (hmac-sha256, key id {last['key_id']}), but ca.yaml names no "
            "audit.key_env: set it to the variable holding that key (records appended without it would look "
            "like a rewrite), or move the log aside to start a new, unkeyed one"
        )
    if last["key_id"] != key.id:
        raise UsageError(
            f"{key.env} holds another key (key id {key.id}) than the one the audit chain in {where} is keyed "
            f"with (key id {last['key_id']}): set {key.env} to the chain's key; a chain keeps one key"
        )


@dataclass(frozen=True)
class VerifyResult:
    """What :func:`verify_chain` found: ``problems`` names each one by seq, in log order."""

    ok: bool
    checked: int
    problems: list[str] = field(default_factory=list)
    head_hash: str = GENESIS
    """The hash of the last record; keep a copy elsewhere to detect a rewritten tail."""
    chain: Chain = UNKEYED
    """``hmac-sha256`` when records are keyed (from ``keyed_from`` on), else ``sha256``."""
    key_id: str = ""
    keyed_from: int = 0
    """The seq of the first keyed record; 0 when none is."""


def describe(result: VerifyResult) -> str:
    """Which kind of chain was checked, e.g. "keyed chain (hmac-sha256, key id ab12cd34)"."""
    if result.chain == UNKEYED:
        return "unkeyed chain (sha256)"
    kind = f"keyed chain (hmac-sha256, key id {result.key_id})"
    if result.keyed_from > 1:
        kind += f" from record {result.keyed_from}, the records before it unkeyed (written before the key was set)"
    return kind


def _missing(first: int, last: int) -> str:
    return f"record {first} is missing" if first == last else f"records {first}–{last} are missing"


def _these(seqs: list[int]) -> str:
    return f"record {seqs[0]} is" if len(seqs) == 1 else f"{len(seqs)} records ({seqs[0]}–{seqs[-1]}) are"


def _check_head(last_seq: int, last_hash: str, head: tuple[int, str] | None) -> list[str]:
    if head is None:
        return ["the audit_head row is missing: the log's length cannot be checked"]
    head_seq, head_hash = head
    if head_seq > last_seq:
        return [f"{_missing(last_seq + 1, head_seq)} at the end: the head says {head_seq} — the log was truncated"]
    if head_seq < last_seq:
        return [f"records {head_seq + 1}–{last_seq} are past the head ({head_seq}): written outside the audit log"]
    if head_hash != last_hash:
        return [f"record {last_seq} does not match the head hash: the last record was replaced"]
    return []


def _unchecked(key_id: str, seqs: list[int], key: ChainKey | None) -> str:
    these = f"{_these(seqs)} keyed (hmac-sha256, key id {key_id})"
    if key is None:
        return (
            f"{these}, but ca.yaml names no audit.key_env to check them with: set it to the variable holding that key"
        )
    return f"{these}, not with the key in {key.env} (key id {key.id}): set {key.env} to the key they were written with"


def verify_chain(
    records: Iterable[Mapping[str, Any]], head: tuple[int, str] | None, key: ChainKey | None
) -> VerifyResult:
    """Walk ``records`` (every field, ``data`` parsed, in seq order) and the head; name every problem by seq.

    ``key`` is the key ``ca.yaml`` names (None: none): keyed records are checked with it, and
    with one configured the chain must be keyed from some record to the end.
    """
    problems: list[str] = []
    unchecked: dict[str, list[int]] = {}
    checked, last_seq, last_hash, keyed_from, key_id = 0, 0, GENESIS, 0, ""
    for record in records:
        checked += 1
        seq, chain = record["seq"], record["chain"]
        if chain == KEYED:
            if not keyed_from:
                keyed_from, key_id = seq, record["key_id"]
            if key is None or record["key_id"] != key.id:
                unchecked.setdefault(record["key_id"], []).append(seq)
            elif not hmac.compare_digest(keyed_hash(record, key), record["hash"]):
                problems.append(f"record {seq} was edited: its hash does not match its content")
        elif chain == UNKEYED:
            if record_hash(record) != record["hash"]:
                problems.append(f"record {seq} was edited: its hash does not match its content")
            if keyed_from:
                problems.append(
                    f"record {seq} is not keyed (sha256) but follows keyed record {keyed_from}:"
                    " it was rewritten without the key"
                )
        else:
            problems.append(f"record {seq} names an unknown chain {chain!r}: it was edited")
        if seq > last_seq + 1:
            problems.append(_missing(last_seq + 1, seq - 1))
        if record["prev_hash"] != last_hash:
            after = f"record {last_seq}" if last_seq else "the start of the log"
            problems.append(
                f"record {seq} does not follow {after}: prev_hash mismatch — a record was deleted or reordered"
            )
        last_seq, last_hash = seq, record["hash"]
    problems.extend(_unchecked(kid, seqs, key) for kid, seqs in unchecked.items())
    if key is not None and checked and not keyed_from:
        problems.append(
            f"no record is keyed, though ca.yaml names audit.key_env {key.env!r}: keyed records were rewritten"
            " without the key — or nothing was appended since the key was set (the next record starts the keyed chain)"
        )
    problems.extend(_check_head(last_seq, last_hash, head))
    return VerifyResult(
        ok=not problems,
        checked=checked,
        problems=problems,
        head_hash=last_hash,
        chain=KEYED if keyed_from else UNKEYED,
        key_id=key_id,
        keyed_from=keyed_from,
    )
