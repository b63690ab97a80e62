import argparse

import pytest

from kafka_archive.cli import epoch_ms, main


def test_times_as_iso_8601_or_epoch_ms():
    assert epoch_ms("1767225600000") == 1_767_225_600_000
    assert epoch_ms("2026-01-01T00:00:00Z") == 1_767_225_600_000
    assert epoch_ms("2026-01-01T01:00:00+01:00") == 1_767_225_600_000
    assert epoch_ms("2026-01-01") == 1_767_225_600_000  # no zone: UTC
    with pytest.raises(argparse.ArgumentTypeError, match="expected an ISO-8601 time"):
        epoch_ms("yesterday")


def test_rewind_needs_exactly_one_target(capsys):
    with pytest.raises(SystemExit):
        main(["rewind", "--group", "g", "--topic", "t", "--to-offset", "1", "--to-time", "1"])
    assert "not allowed with argument" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["rewind", "--group", "g", "--topic", "t"])
    assert "one of the arguments --to-offset --to-time is required" in capsys.readouterr().err


def test_audit_ack_and_list_on_a_local_root(tmp_path, capsys):
    from kafka_archive import config, layout
    from kafka_archive.audit.checkpoint import Alarm, Checkpoint
    from kafka_archive.storage import Storage

    path = tmp_path / "kafka-archive.yaml"
    path.write_text(f"kafka: {{bootstrap_servers: 127.0.0.1:1}}\narchive_root: file://{tmp_path}/a\n")
    alarm = Alarm("t", "s", 1_767_225_600_000, 60_000, "MISSING", 5, 4, "then", "r1", "then")
    Storage().put_bytes(layout.audit_checkpoint(config.load(path).archive_root, "backup"),
                        Checkpoint(alarms={alarm.key: alarm}).to_json())
    with pytest.raises(SystemExit):
        main(["--config", str(path), "audit"])
    assert "required: --group" in capsys.readouterr().err
    assert main(["--config", str(path), "audit", "ack", "--group", "backup", "--topic", "t",
                 "--source", "s", "--window", "2026-01-01T00:00:30Z", "--reason", "known",
                 "--by", "ana"]) == 0
    assert "acknowledged by ana at " in capsys.readouterr().out
    assert main(["--config", str(path), "audit", "list", "--group", "backup"]) == 0
    assert "MISSING 1: topic t, source s, window 2026-01-01T00:00:00Z +60s" in capsys.readouterr().out
    assert main(["--config", str(path), "audit", "ack", "--group", "backup", "--topic", "t",
                 "--source", "other", "--window", "0", "--reason", "x"]) == 1
    assert "no mismatch of topic t, source other" in capsys.readouterr().err
