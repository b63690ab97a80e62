"""Data lost to retention, accepted: the sanctioned way past a retention gap.

By default a topic whose token is below Kafka's earliest retained offset is held out of
every run (planning.Anomaly). A person accepts the loss (`kafka-archive accept-loss`, or
the trigger param `accept_loss`), or the group does so itself (`on_retention_gap: skip`).
Either way the lost range is recorded, with who accepted it, when and why, under
`_runs/<group>/_accepted_loss/` (one small JSON file per range, named by its first offset,
so recording again is harmless); then the token moves to the earliest retained offset by
compare-and-swap. `accepted` reads the records back: verify lists them as known loss.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, replace

from kafka import TopicPartition

from kafka_archive import catalog, layout
from kafka_archive.catalog import AcceptedLoss
from kafka_archive.catalog.rebuild import accepted  # noqa: F401 (the records, read back)
from kafka_archive.catalog.state import key_part
from kafka_archive.config import Config
from kafka_archive.errors import TerminalError
from kafka_archive.plan import inflight
from kafka_archive.plan.rewinds import rows_through, token_to_move
from kafka_archive.storage import Storage
from kafka_archive.tokens import Token, TokenConflictError, TokenStore

log = logging.getLogger(__name__)


class AcceptLossError(TerminalError):
    """Nothing to accept, or not now; nothing was written."""


def archived_through(cat: catalog.Catalog, topic: str, generation: int | None = None,
                     spots: bool = True) -> dict[int, int]:
    """Per partition, one past the highest offset the archive accounts for (in any
    generation, or one): its current rows, the spot a plan began it at without archiving
    (catalog.plan_marks) and the losses recorded. A partition whose token line is gone
    (deleted by a person, to archive it again) is checked against this: what Kafka
    deleted above it was never archived, and is a loss like any retention gap, not a
    silent skip (a new generation begun since included: what an older one holds is not
    lost). spots=False: the rows and the losses only."""
    found = rows_through(cat, topic, generation)
    held = cat.state.topics.get(topic)
    for key, offset in (held.spots.items() if held and spots else ()):
        partition, spot_generation = key_part(key)
        if generation is None or spot_generation == generation:
            found[partition] = max(found.get(partition, 0), offset)
    for (name, partition), ranges in catalog.lost_ranges(cat.state).items():
        if name == topic and ranges:
            found[partition] = max(found.get(partition, 0), max(b for _, b in ranges))
    return found


def lost_spans(cat: catalog.Catalog, topic: str, partition: int, token: int, earliest: int
               ) -> list[tuple[int, int]]:
    """The ranges between a token line and Kafka's earliest offset that are in neither
    Kafka nor the archive: the line's gap less what the archive still holds (current rows
    of any generation: after a rewind, or a line edited down). None when it holds them all: then nothing is
    lost. (A range recorded as lost before is lost still: reported again, it is mailed
    once by its key, and a plan that gave way after recording it mails it on its retry.)"""
    spans = [(r["start"], r["end"]) for r in cat.rows(topic, partition, end_after=token)]
    lost, at = [], token
    for start, end in sorted(spans):
        if at >= earliest:
            break
        if start > at:
            lost.append((at, min(start, earliest)))
        at = max(at, end)
    if at < earliest:
        lost.append((at, earliest))
    return lost


def record(storage: Storage, config: Config, loss: AcceptedLoss) -> str:
    """The record (the truth, under the run folders), then the catalog's entry."""
    url = layout.accepted_loss(config.archive_root, loss.group, loss.topic, loss.partition,
                               loss.lost_from)
    storage.put_bytes(url, json.dumps(asdict(loss), indent=1, sort_keys=True).encode())
    catalog.append(storage, config, loss.group,
                   lambda cat: None if asdict(loss) in cat.state.accepted
                   else {"kind": "loss", "loss": asdict(loss)})
    return url


def accept(config: Config, tokens: TokenStore, consumer, storage: Storage, group: str,
           topic: str, reason: str, by: str, at: str, partition: int | None = None
           ) -> list[AcceptedLoss]:
    """Record the ranges retention deleted from topic (one partition, or each with a gap)
    and move their token lines to Kafka's earliest offset, in one compare-and-swap."""
    config.group(group)  # an unknown group is a config error
    if not reason.strip():
        raise AcceptLossError("say why the loss is acceptable (--reason)")
    read = tokens.read(group, topic)
    if read.token is not None and read.token.offsets:  # checks its cluster
        read = token_to_move(config, tokens, group, topic, AcceptLossError, "")
    token = read.token or Token(group, topic, config.bootstrap_servers, {})
    if run := inflight.holding(storage, config.archive_root, group, topic):
        # its commit would fail on a moved token
        raise AcceptLossError(f"run {run} of group {group} is in flight with topic {topic}: "
                              "let it commit, then accept the loss")
    # a partition whose line a person deleted is judged from where the archive ends
    cat = catalog.open_catalog(storage, config, group, may_rebuild=True)
    lines = {**archived_through(cat, topic), **token.offsets}
    if not lines:
        raise AcceptLossError(f"no token for {group}/{topic} and nothing of it archived: "
                              "nothing is lost; its next run starts from start_from")
    chosen = [partition] if partition is not None else sorted(lines)
    earliest = consumer.beginning_offsets([TopicPartition(topic, p) for p in chosen])
    kafka_from = {tp.partition: o for tp, o in earliest.items()}
    found = {p: spans for p, line in sorted(lines.items()) if p in kafka_from
             and line < kafka_from[p] and (spans := lost_spans(
                 cat, topic, p, line, kafka_from[p]))}
    if not found:
        where = f"partition {partition}" if partition is not None else "any partition"
        raise AcceptLossError(
            f"{group}/{topic}: no retention gap in {where} (token "
            f"{', '.join(f'{p}: {token.offsets.get(p)}' for p in chosen)}; Kafka's earliest "
            f"{', '.join(f'{tp.partition}: {o}' for tp, o in sorted(earliest.items()))}): "
            "nothing to accept")
    losses = [AcceptedLoss(group, topic, p, a, b, by, at, reason)
              for p, spans in found.items() for a, b in spans]
    for loss in losses:  # first the record: a loss is never accepted without one
        record(storage, config, loss)
    offsets = {**token.offsets, **{p: kafka_from[p] for p in found}}
    try:
        tokens.write(replace(token, offsets=offsets, bootstrap=config.bootstrap_servers),
                     expected_version=read.version)
    except TokenConflictError as exc:
        raise AcceptLossError(f"token {group}/{topic} changed meanwhile (a run committed): "
                              f"it was not moved; run accept-loss again ({exc.found})") from None
    for loss in losses:
        log.warning("accepted: %s", loss.describe())
    return losses

