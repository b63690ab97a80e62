"""The event-time layout against an independent computation: the C library's gmtime."""

import re
import time

import pytest
from hypothesis import example, given, strategies as st

from kafka_archive import layout
from kafka_archive.layout import GRANULARITY_MS, LayoutSpec

DAY, HOUR, MINUTE = (GRANULARITY_MS[g] for g in ("day", "hour", "minute"))
Y1970, Y2200 = 0, 7_258_118_400_000  # 2200-01-01T00:00Z
SPECS = [LayoutSpec("event_time", g) for g in ("day", "hour", "minute")]

# any ms in years 1..9999; and, mostly, 1970..2200 within a second of a day, hour or
# minute boundary (where an off-by-one would show)
anywhere = st.integers(layout.MIN_EVENT_MS, layout.MAX_EVENT_MS - 1)
near_boundary = st.builds(
    lambda start, unit, step, delta: start - start % unit + step * unit + delta,
    st.integers(Y1970, Y2200), st.sampled_from([DAY, HOUR, MINUTE]), st.integers(0, 3),
    st.integers(-1000, 1000))
timestamps = st.one_of(near_boundary, st.integers(Y1970, Y2200), anywhere)


def expected_path(ms: int, granularity: str) -> str:
    t = time.gmtime(ms // 1000)  # floor: -1 ms is 1969-12-31T23:59:59.999
    parts = [f"dt={t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}", f"hr={t.tm_hour:02d}",
             f"min={t.tm_min:02d}"]
    return "/".join(parts[:("day", "hour", "minute").index(granularity) + 1])


@given(timestamps, st.sampled_from(SPECS))
@example(-1, SPECS[1]).via("the last ms before the epoch")
@example(0, SPECS[1]).via("the epoch")
@example(layout.MIN_EVENT_MS, SPECS[2]).via("the first ms of year 1")
@example(layout.MAX_EVENT_MS - 1, SPECS[2]).via("the last ms of year 9999")
@example(951_782_400_000, SPECS[0]).via("2000-02-29, a leap day of a century")
def test_time_partition_matches_gmtime_and_its_range_holds_the_time(ms, spec):
    path = layout.time_partition(ms, spec)
    assert path == expected_path(ms, spec.granularity)
    start, end = layout.time_partition_range(path, spec)
    unit = GRANULARITY_MS[spec.granularity]
    assert start <= ms < end and end - start == unit and start % unit == 0
    assert layout.time_partition(start, spec) == layout.time_partition(end - 1, spec) == path
    if end < layout.MAX_EVENT_MS:
        assert layout.time_partition(end, spec) != path


@given(st.integers(Y1970, Y2200))
def test_a_coarser_path_gives_the_coarser_range(ms):
    minute = LayoutSpec("event_time", "minute")
    day_path, hour_path, _ = layout.time_partition(ms, minute).split("/")
    assert layout.time_partition_range(day_path, minute) == \
        layout.time_partition_range(day_path, SPECS[0])
    assert layout.time_partition_range(f"{day_path}/{hour_path}", minute) == \
        layout.time_partition_range(f"{day_path}/{hour_path}", SPECS[1])


def test_configured_prefixes_and_formats_hive_style():
    spec = LayoutSpec("event_time", "hour", prefixes=("", "", "m="),
                      formats=("year=%Y/month=%m/day=%d", "hour=%H", "%M"))
    ms = 1_795_244_400_000 + 59 * MINUTE  # 2026-11-21T07:59Z
    assert layout.time_partition(ms, spec) == "year=2026/month=11/day=21/hour=07"
    assert layout.time_partition_range("year=2026/month=11/day=21/hour=07", spec) == \
        (1_795_244_400_000, 1_795_244_400_000 + HOUR)
    compact = LayoutSpec("event_time", "day", formats=("%Y%m%d%%", "%H", "%M"))
    assert layout.time_partition(ms, compact) == "dt=20261121%"


@pytest.mark.parametrize("path", ["dt=2026-11-21/hr=24", "dt=2026-02-30", "dt=2026-11-21/hr=7",
                                  "dt=2026-11-21/min=07", "partition=3", "", "dt=0000-01-01"])
def test_paths_not_of_the_layout_are_refused(path):
    with pytest.raises(ValueError):
        layout.time_partition_range(path, SPECS[1])


def test_event_times_outside_years_1_to_9999_have_no_partition():
    for ms in (layout.MIN_EVENT_MS - 1, layout.MAX_EVENT_MS):
        with pytest.raises(ValueError, match="outside years 1..9999"):
            layout.time_partition(ms, SPECS[1])


@pytest.mark.parametrize("kwargs, message", [
    ({"kind": "daily"}, "kind must be"),
    ({"granularity": "second"}, "granularity must be one of day, hour, minute"),
    ({"formats": ("%Y-%m", "%H", "%M")}, "formats.day '%Y-%m' must hold %Y %m %d once"),
    ({"formats": ("%Y-%m-%d", "%H%H", "%M")}, "formats.hour"),
    ({"formats": ("%Y-%m-%d-%S", "%H", "%M")}, "formats.day"),
    ({"formats": ("%Y-%m-%d%", "%H", "%M")}, "formats.day"),
    ({"prefixes": ("_dt=", "hr=", "min=")}, "must not be empty or start with _ or ."),
    ({"prefixes": ("dt=", "/", "min=")}, "must not be empty"),
])
def test_bad_layouts_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        LayoutSpec(**{"kind": "event_time", **kwargs})


def test_paths_of_the_partitioned_group():
    root = "s3://bucket/archive"
    assert layout.event_data_file(root, "partitioned", "orders", "dt=2026-11-21/hr=07", 3, 1, 42,
                                  {"kind": "text", "compression": "gzip"}) == \
        "s3://bucket/archive/partitioned/orders/dt=2026-11-21/hr=07/1_3_00000000000000000042.txt.gz"
    assert layout.quarantine_file(root, "partitioned", "orders", 3, 1, 42) == \
        "s3://bucket/archive/partitioned/orders/_quarantine/partition=3/1_3_00000000000000000042.seq"
    assert layout.success_marker(root, "partitioned", "orders", "dt=2026-11-21") == \
        "s3://bucket/archive/partitioned/orders/dt=2026-11-21/_SUCCESS"
