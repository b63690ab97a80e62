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
