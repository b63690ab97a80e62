"""Mutation testing of the simulation (issue 56): single bugs planted in the library, one
at a time, each in a copy of `plugins/`; for each, the simulation's random sequences (a
budget of seeds per shape, as the unit tier runs them) and, apart, its kept sequences.
A mutant is caught when an invariant breaks; the score counts the mutants the random
sequences catch (a kept sequence was written for its bug: catching it there proves
little).

    .venv/bin/python -m tests.support.sim.mutants                # every mutant
    .venv/bin/python -m tests.support.sim.mutants --only lease   # names containing it
    .venv/bin/python -m tests.support.sim.mutants --budget 2     # twice the seeds

The issue's defects 1-12 come first, as the code was before their fix (10 and 12 are
outside what the simulation models: Airflow's own failures, Spark Connect; they are
listed and reported as not modelled, with the test on the real services that catches
each), then bugs of our own: each a plausible slip in the protocol's code. "replay" runs the replay's sequences (sim.replay). A guard that only
another bug can reach (the catalog's refusal of overlapping rows) is no single mutant:
without that other bug nothing tells it is gone.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
LIBRARY = REPO / "plugins"
# seeds per shape at --budget 1: the unit tier's own (tests/unit/test_protocol_simulation.py,
# its SEQUENCES, TABLE_, EVENT_, PARSED_, REGISTRY_, AUDIT_ and S3_SEQUENCES; 100 of its 300 replay
# sequences)
# (in this order: a mutant is caught at its first shape, and the table worlds, a minute
# each, reach most of the protocol; the files world's 2,000 take four)
SEEDS = {"tables": 100, "events": 200, "parsed": 30, "registry": 20, "files": 2000,
         "audit": 200, "s3": 20, "replay": 100}


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str          # under plugins/kafka_archive/
    old: str           # text replaced once (it must be there exactly once)
    new: str
    modelled: str = ""  # empty: the simulation models it; else which real test catches it


MUTANTS = [
    # --- issue 56's defects, as before their fix ------------------------------------------
    Mutant("d1 plan ignores a compaction done while it planned", "plan/runs.py",
           "    moved = None if held is not None or read_at is None else next(",
           "    moved = None if True else next("),
    Mutant("d2 compaction off leaves a killed one's lease", "commit/compaction.py",
           "    if spec.compact_after_s is None and inflight.compacting(storage, root, group) is None:",
           "    if spec.compact_after_s is None:"),
    Mutant("d3 lease released without owning it", "catalog/lease.py",
           '        storage.put_if(url, json.dumps({"released": token, "at": time.time()}).encode(),\n'
           '                       version)',
           "        storage.delete(url)"),
    Mutant("d4 maintenance waits for a compaction's committed.json", "commit/table_maintenance.py",
           "    if run_id.startswith(COMPACTION_PREFIX):  # a compaction writes no committed.json",
           "    if False:"),
    Mutant("d5 compaction reads its bin whole", "formats/parquet.py",
           "                    if not ordered and sum(b.nbytes for b in pending) >= ROW_GROUP_BYTES:",
           "                    if False:"),
    Mutant("d6 idle compaction leaves a folder", "commit/compaction.py",
           "    folder = catalog.run_folder(root, group, cid)\n    units = []",
           "    folder = catalog.run_folder(root, group, cid)\n    units = []\n"
           "    storage.put_bytes(layout.run_file(root, group, cid, layout.COMPACTION_STARTED),"
           " b'{}')"),
    Mutant("d6 rewind lists a topic's tree per partition", "plan/runs.py",
           "    if where not in listings:", "    if True:"),
    Mutant("d7 replay sends a record past max.message.bytes", "archive/replay_job.py",
           "    if limit is not None and record_size(r) > int(limit):",
           "    if False:"),
    Mutant("d7 replay sends a keyless message to a compacted target", "archive/replay_job.py",
           '    if r.key is None and "compact" in settings.get("cleanup.policy", ""):',
           "    if False:"),
    Mutant("d8 audit mail recorded after it is sent", "airflow/tasks.py",
           "    incremental.mark_mailed(storage, cfg, group, keys, runs.now_utc()",
           "    (lambda *args: None)(storage, cfg, group, keys, runs.now_utc()"),
    Mutant("d8 a producer killed mid-window is an EXCESS", "audit/reconcile.py",
           '                      else "UNAUDITED" if key in uncertain else "EXCESS")',
           '                      else "EXCESS")'),
    Mutant("d8 a rescan's finding cleared by one late message", "audit/checkpoint.py",
           "                carried[key] = catalog_now", "                pass"),
    Mutant("d9 retried commit announces nothing", "airflow/tasks.py",
           '    sent = json.loads(storage.get_or_none(outbox) or b"{}") if repeated else {}',
           '    sent = {"mail": True, "events": True} if repeated else {}'),
    Mutant("d10 no mail for a run failed without its task's callback", "airflow/alerting.py",
           "    if task_id in MAILS_ITS_OWN_FAILURE or _seen_within(mails, run_id, SEEN_WAIT_S):",
           "    if True:",
           modelled="tests/integration/test_alerts_airflow.py::test_a_task_killed_before_its_callback"),
    Mutant("d11 a rewind's held range reported lost", "plan/losses.py",
           '    spans = [(r["start"], r["end"]) for r in cat.rows(topic, partition, end_after=token)]',
           '    spans = [] and [(r["start"], r["end"]) for r in cat.rows(topic, partition, end_after=token)]'),
    Mutant("d12 Connect's parallelism from default.parallelism", "spark.py",
           'selectExpr("max(p)")', 'selectExpr("min(p)")',
           modelled="tests/integration (Spark Connect): the simulation runs no Spark"),
    # --- the issue's own examples and ours -------------------------------------------------
    Mutant("local writes not atomic (written in place)", "storage.py",
           """        self.tmp = tempfile.NamedTemporaryFile(dir=self.path.parent, prefix=f".{self.path.name}.",
                                               delete=False)""",
           """        self.tmp = open(self.path, "wb")"""),
    Mutant("the Kafka reader returns one message past the slice", "archive/source.py",
           "                    if offset >= end:", "                    if offset > end:"),
    Mutant("min_records waits on a pending marker", "plan/planning.py",
           "            age_s = (now_ms - oldest) / 1000 if oldest is not None else policy.max_delay_s",
           "            age_s = (now_ms - oldest) / 1000 if oldest is not None else 0"),
    Mutant("a skipped gap up to the log's end never moves the token", "plan/planning.py",
           "            if token is not None and start != token:  # a skipped gap up to the log's end:",
           "            if False:  # a skipped gap up to the log's end:"),
    Mutant("a failure naming another run is a new incident", "monitor/alerts.py",
           "    return f\"{task_id} {error_class} {_AIRFLOW_RUN_ID.sub('<run>', error)}\"",
           "    return f\"{task_id} {error_class} {error}\""),
    Mutant("a finalize records a watermark older than the one recorded", "commit/finalizing.py",
           '        if stored is None or state["through_ms"] > stored:', "        if True:",
           modelled="tests/unit/commit/test_finalizing.py::"
                    "test_a_finalize_killed_before_its_entry_leaves_a_later_recorded_watermark"),
    Mutant("a table property set gives up on a lost race", "commit/iceberg.py",
           '    _until_won(table, f"set {sorted(properties)}", attempt)', "    attempt()"),
    Mutant("commit leaves its in-flight mark", "commit/protocol.py",
           "    inflight.clear(storage, root, plan.group, plan.run_id)\n    for e in manifest",
           "    for e in manifest"),
    Mutant("a token a person deleted written back by a retried commit", "commit/protocol.py",
           "        if topic in earlier and tokens.read(plan.group, topic).token is None:",
           "        if False:"),
    Mutant("rewind keeps the rows it archives again", "commit/protocol.py",
           "                removed += [r for r in cat.rows(s.topic, s.partition, plan.generation,",
           "                removed += [] and [r for r in cat.rows(s.topic, s.partition, plan.generation,"),
    Mutant("job's file moved aside is not put back when nothing replaced it", "commit/protocol.py",
           "                if storage.size(f[\"url\"]) is None and storage.size(aside) is not None:",
           "                if False:"),
    Mutant("a straddling row's messages archived again", "plan/rewinds.py",
           '        start = max([s.start] + [p["end"] for p in straddling])',
           "        start = s.start"),
    Mutant("plan forgets the committed-run check", "plan/runs.py",
           '    if storage.size(layout.run_file(root, group, run_id, "committed.json")) is not None:',
           "    if False:"),
    Mutant("failure mailed again within the day", "monitor/alerts.py",
           "REMIND_AFTER_S = 24 * 3600", "REMIND_AFTER_S = 0"),
    # the soaks' findings (each kept as a sequence in the unit tier)
    Mutant("finalize waits on the watermark for a rewound final hour", "commit/finalizing.py",
           "    for topic in sorted(set(through) | set(cat.state.topics)) if holder is None else ():",
           "    for topic in sorted(through) if holder is None else ():"),
    Mutant("a failed cleanup rebuilds the catalog", "catalog/store.py",
           "                catalog.write_snapshot()\n            except CatalogUnreadable",
           "                catalog.write_snapshot()\n"
           "                clean(catalog.storage, catalog.root, catalog.group)\n"
           "            except CatalogUnreadable"),
    Mutant("a given-up run's token copy taken for a run committing now", "commit/protocol.py",
           "        return storage.size(layout.run_file(root, plan.group, run_id, runs.GIVEN_UP)) is None",
           "        return True"),
    Mutant("a rewind re-cuts an hour's files", "archive/slice_writer.py",
           "        key = folder if offset is None else (folder, bisect.bisect_right(self.before_ends, offset))",
           "        key = folder"),
    Mutant("the orphan sweep takes a commit's files once its mark is deleted",
           "commit/table_maintenance.py",
           "        inflight.holding(storage, root, group), _not_given_up(storage, root, group),",
           "        inflight.holding(storage, root, group),"),
    Mutant("a re-executed commit adds its run to a table again", "commit/protocol.py",
           "        snapshots = (stored.get(\"table_snapshots\", {}) if stored is not None\n"
           "                     else iceberg.commit_tables(tables, plan, manifest))",
           "        snapshots = iceberg.commit_tables(tables, plan, manifest)"),
    Mutant("a plan's retry never gives way to a compaction", "plan/runs.py",
           "            if manifests.read(storage, config.archive_root, group.name, plan.run_id) is None:",
           "            if False:"),
    Mutant("the audit judges a topic a plan in flight holds", "airflow/tasks.py",
           "    through = {t: None if waiting is None or t in waiting else ms for t, ms in through.items()}",
           "    through = through"),
    Mutant("a rescan that cannot judge a window forgets what it found", "audit/checkpoint.py",
           '            if v.status == "PENDING" and before is not None and before[1] != "PENDING":',
           "            if False:"),
    Mutant("a plan that moves no file aside never looks for a compaction", "plan/runs.py",
           "    return plan.catalog_seq\n",
           "    return plan.catalog_seq if plan.superseded or plan.cuts else None\n"),
    Mutant("late retention loss not kept as a gap", "commit/protocol.py",
           "            ends[(s.topic, s.partition)] = s.start\n            continue",
           "            continue"),
    # this stop's fixes (found by the audited world)
    Mutant("a late count drops a rescan's finding", "audit/checkpoint.py",
           "                    and (before[2], _catalog_count(before)) != (v.expected, v.archived)):",
           "                    and _catalog_count(before) != v.archived):"),
    Mutant("a plan given up by hand holds no topic", "plan/inflight.py",
           '    note = last(storage, root, group)\n    if note is None or',
           '    note = None\n    if note is None or'),
    Mutant("a failed announcement record fails the commit task", "airflow/tasks.py",
           "        except ArchiveError as unrecorded:  # the events go out all the same",
           "        except ImportError as unrecorded:  # the events go out all the same"),
    Mutant("maintenance asks a run's record only, never the catalog",
           "commit/table_maintenance.py",
           "        return runs.in_catalog(catalog.open_catalog(storage, config, group), run_id, topic)",
           "        return False"),
    Mutant("a rewind drops what only the files it replaces hold", "archive/job.py",
           "        if self.group.parsed_table or not earlier.usable(s.earlier):\n",
           "        if True:\n"),
    Mutant("the job's retention check ignores a rewind's earlier records", "archive/job.py",
           "    if s.archived_before and earlier.usable(s.earlier):",
           "    if False:"),
    Mutant("a parsed table's rewind drops what only the files it replaces hold",
           "archive/job.py",
           "        if self.group.parsed_table and row[\"gaps\"] and earlier.usable(s.earlier):",
           "        if False:"),
    Mutant("a retried job leaves the files it names otherwise now", "archive/job.py",
           "        s for s in to_read if (s.topic, s.partition) in missed or retried],",
           "        s for s in to_read if (s.topic, s.partition) in missed],"),
    # offsets reused (an unclean election) and generations side by side
    Mutant("an archive past Kafka's latest offset is rewound, not held", "plan/planning.py",
           "        if (end := (archived or {}).get(s.topic, {}).get(s.partition, 0)) > s.latest:",
           "        if (end := (archived or {}).get(s.topic, {}).get(s.partition, 0)) > 1 << 62:"),
    Mutant("a line deleted under start_from: latest skips to Kafka's latest", "plan/runs.py",
           '        elif end is not None and start_from == "latest":',
           '        elif end is not None and start_from == "never":'),
    Mutant("a line deleted under latest during a capped rewind jumps to where a plan began",
           "plan/runs.py",
           "                held[s.topic] = losses.archived_through(cat, s.topic, spots=False)",
           "                held[s.topic] = losses.archived_through(cat, s.topic, spots=True)"),
    Mutant("the finalizer and the audit overlook an open transaction", "commit/finalizing.py",
           "    for tp, timestamp in [*behind.items(), *held_back(config, caught_up).items()]:",
           "    for tp, timestamp in [*behind.items()]:"),
    Mutant("a partition with only aborted offsets to read counts as archived up to now",
           "commit/finalizing.py",
           "    caught_up.update({tp: stable[tp] for tp in lagging if tp not in behind})", ""),
    Mutant("verify calls offsets between files past the token a hole", "tools/offset_checks.py",
           "    pending, rest = _split_all(rest, [] if token_offset is None else [(token_offset, end)])",
           "    pending = []"),
    Mutant("one partition without a leader fails the whole group's plan", "plan/planning.py",
           "        if len(topics) < 2:\n            raise",
           "        if True:\n            raise"),
    Mutant("two groups on one root share one folder of runs (and in-flight mark)", "layout.py",
           '    return join(root, "_runs", group)', '    return join(root, "_runs")'),
    Mutant("the plan never compares a rewind's replaced rows with Kafka", "archive/earlier.py",
           "    tp = TopicPartition(s.topic, s.partition)\n    if (found :=",
           "    return None\n    if (found :="),
    Mutant("the plan compares only the tail of a rewind's last replaced file with Kafka",
           "archive/earlier.py", "            not s.earlier_last:", "            True:"),
    Mutant("a retried job's clean-up looks for the config's generation", "archive/job.py",
           "runs.unlisted(storage, config, group, cat, s, plan.generation, written,",
           "runs.unlisted(storage, config, group, cat, s, config.generation, written,"),
    Mutant("a lost range is judged by the configured generation only", "plan/runs.py",
           "            ends[s.topic] = losses.archived_through(cat, s.topic)",
           "            ends[s.topic] = losses.archived_through(cat, s.topic, config.generation)"),
    Mutant("verify calls what another generation holds a hole", "tools/verify.py",
           "    return [r for s in (known.summaries.values() if known else ())",
           "    return [] and [r for s in (known.summaries.values() if known else ())"),
    Mutant("the audit counts what another generation holds too", "audit/gather.py",
           '        for field, weight in (("audit", sign), ("audit_elsewhere", -sign)):',
           '        for field, weight in (("audit", sign),):'),
    Mutant("a new generation's plan names no other generation's rows", "plan/rewinds.py",
           "        found.append(replace(s, elsewhere=rows) if rows else s)",
           "        found.append(s)"),
    Mutant("the job takes an other generation's message at an offset for its own",
           "archive/earlier.py",
           "            held[i] = held[i] or _is(other, b.value[i].as_py(), b.key[i].as_py(),",
           "            held[i] = True or _is(other, b.value[i].as_py(), b.key[i].as_py(),"),
    # typed tables (the registry world)
    Mutant("a registered field read as null", "formats/schemas.py",
           "            values[column] = _converted(convert, fields.get(name), schema_id)",
           "            values[column] = _converted(convert, fields.get(name) if name != 'qty' "
           "else None, schema_id)"),
    Mutant("a schema version that cannot join a column is not refused", "formats/schemas.py",
           "        merged = mine if current is None else columns.promoted(current, mine)",
           "        merged = mine if current is None else (columns.promoted(current, mine) "
           "or mine)"),
    Mutant("a dead letter's reason names the wrong field", "formats/schemas.py",
           '            raise Misfit(f"schema id {schema_id} has field {where}{renamed} as',
           '            raise Misfit(f"schema id {schema_id} has field {name}x{renamed} as'),
    Mutant("a renamed field's aliases are not its identities", "formats/schemas.py",
           '    return (field.name, *json.loads(meta.get(ALIASES, b"[]")))',
           "    return (field.name,)"),
    # a rewind in flight across an unclean election (the 47-minute soak's s3 seed 902376)
    Mutant("a rewind's job does not compare the replaced rows' last messages with Kafka's",
           "archive/job.py", "        if s.earlier_last:  #", "        if False:  #"),
    Mutant("a parsed table's rewind job skips the replaced rows' last messages",
           "archive/job.py", "        batches = source.read(consumer, s.topic, s.partition, s.start, s.end)\n",
           "        batches = source.read(consumer, s.topic, s.partition, s.start, s.end)\n"
           "        if self.group.parsed_table:\n            return batches\n"),
    Mutant("a rewind's job mixes Kafka's messages with other archived ones",
           "archive/earlier.py", "            raise _reused(where, r.offset)\n",
           "            return\n"),
    Mutant("a commit replaces the rows of a slice that found other messages in Kafka",
           "manifest.py", 'for key in ("retention_lost", "offsets_reused")',
           'for key in ("retention_lost",)'),
    Mutant("verify does not ask Kafka about offsets no file holds", "tools/verify.py",
           "    look = KafkaLook(kafka)\n", "    look = KafkaLook(None)\n"),
    # S3's own paths (the s3 world)
    Mutant("an S3 listing reads its first page only", "storage.py",
           "                for page in pages:\n                    for obj in page.get",
           "                for page in list(pages)[:1]:\n                    for obj in page.get"),
    Mutant("an S3 compare-and-swap overwrites whatever is there", "storage.py",
           '    condition = ({"IfNoneMatch": "*"} if expected_version is None\n'
           '                 else {"IfMatch": expected_version})',
           "    condition = {}"),
    Mutant("an S3 If-Match on a deleted object is no conflict", "storage.py",
           " or (expected_version is not None and retries.is_missing(exc)):", ":"),
]


def planted(mutant: Mutant, into: Path) -> Path:
    """A copy of plugins/ with the mutant's change; its root (for PYTHONPATH)."""
    target = into / "plugins"
    shutil.copytree(LIBRARY, target, ignore=shutil.ignore_patterns("__pycache__"))
    path = target / "kafka_archive" / mutant.path
    text = path.read_text()
    if text.count(mutant.old) < 1:
        raise SystemExit(f"mutant {mutant.name!r}: {mutant.old!r} is not in {mutant.path}")
    path.write_text(text.replace(mutant.old, mutant.new, 1))
    return target


def explored(root: Path, budget: float, first_seed: int,
             shapes: list[str] | None = None) -> dict[str, str | None]:
    """Per shape (all, or `shapes`): the first violation's kind the random sequences
    found, or None."""
    found = {}
    for shape, seeds in SEEDS.items():
        if shapes and shape not in shapes:
            continue
        count = max(1, int(seeds * budget))
        which = ["--replay"] if shape == "replay" else ["--shape", shape, "--no-shrink",
                                                         "--stop-at-first"]
        done = subprocess.run(
            [sys.executable, "-m", "tests.support.sim", *which, "--first-seed",
             str(first_seed), "--sequences", str(count)],
            cwd=REPO, env={**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{REPO}"},
            capture_output=True, text=True, timeout=3600)
        line = next((l for l in done.stdout.splitlines() if "violations:" in l), done.stderr[-300:])
        found[shape] = line.split("violations:", 1)[-1].strip()
        if found[shape] in ("none", "0"):  # (the replay's line gives a count)
            found[shape] = None
        if found[shape]:
            break  # caught: the other shapes need not run
    return found


def kept(root: Path) -> str | None:
    """Whether the unit tier's kept sequences (and the checks' own tests) fail."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
         "tests/unit/test_protocol_simulation.py", "-k", "found or finds or can_fail"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{REPO}"},
        capture_output=True, text=True, timeout=3600)
    return None if done.returncode == 0 else (done.stdout.strip().splitlines() or ["?"])[-1]


def judge(mutant: Mutant, budget: float, first_seed: int, shapes: list[str] | None) -> dict:
    started = time.monotonic()
    if mutant.modelled:
        return {"mutant": mutant.name, "modelled": False, "caught_by": mutant.modelled}
    with tempfile.TemporaryDirectory(prefix="kafka-archive-mutant-") as folder:
        root = planted(mutant, Path(folder))
        found = explored(root, budget, first_seed, shapes)
        sequences = kept(root)
    caught = next((f"{shape}: {kind}" for shape, kind in found.items() if kind), None)
    return {"mutant": mutant.name, "modelled": True, "random": caught, "kept": sequences,
            "seconds": round(time.monotonic() - started)}


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--only", help="the mutants whose name contains this")
    args.add_argument("--budget", type=float, default=1.0, help="seeds per shape, x SEEDS")
    args.add_argument("--first-seed", type=int, default=0)
    args.add_argument("--workers", type=int, default=2)
    args.add_argument("--shapes", help="only these shapes' random sequences, comma-separated "
                                       "(a quick look; the score is of all of them)")
    opts = args.parse_args(argv)
    chosen = [m for m in MUTANTS if not opts.only or opts.only in m.name]
    results = []
    with ThreadPoolExecutor(opts.workers) as pool:  # each printed as it is judged (in order)
        shapes = opts.shapes.split(",") if opts.shapes else None
        for r in pool.map(lambda m: judge(m, opts.budget, opts.first_seed, shapes), chosen):
            results.append(r)
            if not r["modelled"]:
                print(f"  not modelled  {r['mutant']}: {r['caught_by']}", flush=True)
            else:
                print(f"  {'CAUGHT' if r['random'] else 'missed':6}  {r['mutant']}: random "
                      f"{r['random'] or 'nothing'}; kept sequences "
                      f"{'fail' if r['kept'] else 'pass'} ({r['seconds']} s)", flush=True)
    modelled = [r for r in results if r["modelled"]]
    caught = sum(bool(r["random"]) for r in modelled)
    print(f"score: {caught} of {len(modelled)} modelled mutants caught by an invariant in "
          f"random sequences (budget {opts.budget} x {json.dumps(SEEDS)}); "
          f"{sum(bool(r['kept']) for r in modelled)} by the kept sequences; "
          f"{len(results) - len(modelled)} not modelled")
    return 0 if caught == len(modelled) else 1


if __name__ == "__main__":
    sys.exit(main())
