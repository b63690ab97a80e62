from dataclasses import replace

from kafka_archive.config import FormatSpec, Group, Policy
from kafka_archive.monitor.status import Held, holes, duration, render, rows
from kafka_archive.tokens import Token

GROUP = Group(name="backup", schedule=None, include=(".*",), exclude=("_.*",),
              start_from="earliest", on_retention_gap="fail", format=FormatSpec(),
              policy=Policy(), topic_policies=())
NOW = 1_800_000_000_000
TOKEN = Token(group="backup", topic="t", bootstrap="k:9092", offsets={0: 70, 1: 50, 3: 9},
              committed_at="2027-01-15T08:00:00+00:00", run_id="scheduled__x")


def test_lag_in_messages_and_time_per_partition():
    kafka = {0: (0, 100), 1: (0, 50), 2: (10, 40)}  # 2 has no token line; 3 left Kafka
    got = {r.partition: r for r in rows(GROUP, "t", TOKEN, kafka, {0: NOW - 90_000, 2: NOW - 5},
                                        NOW)}
    assert (got[0].token, got[0].end, got[0].lag_messages, got[0].lag_ms) == (70, 100, 30, 90_000)
    assert (got[1].lag_messages, got[1].lag_ms) == (0, 0)  # caught up
    assert (got[2].token, got[2].lag_messages, got[2].lag_ms) == (None, 30, 5)  # from earliest
    assert (got[3].token, got[3].end, got[3].lag_messages, got[3].lag_ms) == (9, None, None, None)
    assert {r.committed_at for r in got.values()} == {"2027-01-15T08:00:00+00:00"}
    assert {r.run_id for r in got.values()} == {"scheduled__x"}


def test_without_token_start_from_latest_has_no_lag_and_unknown_time_is_none():
    latest = replace(GROUP, start_from="latest")
    (row,) = rows(latest, "t", None, {0: (0, 100)}, {}, NOW)
    assert (row.token, row.lag_messages, row.lag_ms, row.committed_at) == (None, 0, 0, None)
    (row,) = rows(GROUP, "t", None, {0: (0, 100)}, {0: None}, NOW)
    assert (row.lag_messages, row.lag_ms) == (100, None)  # no message readable there


def test_table_has_a_header_and_one_aligned_line_per_partition():
    table = render(rows(GROUP, "t", TOKEN, {0: (0, 100)}, {0: NOW - 3_723_000}, NOW,
                        {0: Held(70, 2)})).splitlines()
    assert table[0].split() == ["GROUP", "TOPIC", "PARTITION", "TOKEN", "END", "LAG", "LAG",
                                "TIME", "ARCHIVED", "FILES", "LAST", "COMMIT", "RUN"]
    assert table[1].split() == ["backup", "t", "0", "70", "100", "30", "1h02m", "70", "2",
                                "2027-01-15T08:00:00+00:00", "scheduled__x"]
    assert table[3].split()[:9] == ["backup", "t", "3", "9", "-", "-", "?", "0", "0"]
    assert table[0].index("END") == table[1].index("100")


def test_duration():
    assert [duration(ms) for ms in (None, 0, 12_999, 307_000, 3_723_000, 93_600_000)] == [
        "?", "0s", "12s", "5m07s", "1h02m", "1d2h"]


def test_holes_are_offsets_below_the_token_in_no_row_and_no_accepted_loss():
    held = Held(180, 3, ((0, 100), (110, 190)), lost=((100, 105),))
    assert holes(held, 195) == ((105, 110), (190, 195))  # [100, 105) accepted as lost
    assert holes(held, 190) == ((105, 110),)
    assert holes(Held(0, 0), 195) == () and holes(None, 5) == ()  # nothing archived yet


def test_a_topic_kafka_no_longer_has_is_flagged_and_the_others_shown(tmp_path):
    from kafka_archive import config
    from kafka_archive.monitor.status import status
    from kafka_archive.tokens import LocalTokenStore, Token

    path = tmp_path / "c.yaml"
    path.write_text("kafka: {bootstrap_servers: 'b:9092'}\narchive_root: file:///x\n"
                    "groups: {backup: {}}\n")
    cfg = config.load(path)
    tokens = LocalTokenStore(tmp_path / "tokens")
    tokens.write(Token("backup", "gone", "b:9092", {0: 5, 1: 7}), None)

    class Kafka:  # a cluster without that topic and with no other
        def topics(self):
            return set()

    found = status(cfg, tokens, Kafka(), NOW, "backup")
    assert [(s.topic, s.partition, s.token) for s in found] == [("gone", 0, 5), ("gone", 1, 7)]
    assert all(s.problem.startswith("Kafka has no such topic") for s in found)
    assert render(found).count("PROBLEM backup/gone: Kafka has no such topic") == 1


def test_a_plan_in_flight_is_named_once_with_its_age():
    found = [replace(row, in_flight="r9", in_flight_ms=754_000)
             for row in rows(GROUP, "t", TOKEN, {0: (0, 100), 1: (0, 5)}, {}, NOW)]
    lines = render(found).splitlines()
    assert lines[-1] == ("IN FLIGHT backup: run r9, planned 12m34s ago, has not committed "
                         "(failed, or still running); the group's next run finishes it")
    assert sum("IN FLIGHT" in line for line in lines) == 1
