from kafka_archive import layout


def test_file_name_is_generation_partition_and_20_digit_first_offset():
    name = layout.file_name(3, 7, 1234, "sequencefile")
    assert name == "3_7_00000000000000001234.seq"
    assert layout.parse_file_name(name) == layout.ArchivedFile(3, 7, 1234, "seq")
    assert layout.parse_file_name("notes.txt") is None


def test_paths_under_the_archive_root():
    root = "s3://bucket/archive"
    assert layout.data_file(root, "backup", "orders", 2, 1, 99, "sequencefile") == \
        "s3://bucket/archive/backup/orders/partition=2/1_2_00000000000000000099.seq"
    assert layout.run_file(root, "backup", "manual__2026-01-01T00:00:00+00:00", "plan.json") == \
        "s3://bucket/archive/_runs/backup/manual__2026-01-01T00_00_00_00_00/plan.json"
    moved = layout.superseded(root, "r1", "s3://bucket/archive/backup/orders/partition=2/x.seq")
    assert moved == "s3://bucket/archive/_superseded/r1/backup/orders/partition=2/x.seq"


def test_parse_url_reads_back_every_kind_of_archive_path_and_nothing_else():
    from kafka_archive.layout import LayoutSpec, parse_url
    root, hourly = "s3://b/a", LayoutSpec(kind="event_time", granularity="hour")
    built = {
        "partition": layout.data_file(root, "backup", "t", 3, 1, 10, "sequencefile"),
        "time": layout.event_data_file(root, "p", "t", "dt=2026-11-23/hr=19", 3, 1, 10,
                                       "sequencefile"),
        "late": layout.late_file(root, "p", "t", "dt=2026-11-23/hr=19", 3, 1, 10, "sequencefile"),
        "quarantine": layout.quarantine_file(root, "p", "t", 3, 1, 10),
    }
    for place, url in built.items():
        where = parse_url(root, url, LayoutSpec() if place == "partition" else hourly)
        assert (where.topic, where.place, where.name.partition, where.name.first_offset) == (
            "t", place, 3, 10), url
        assert where.time_path == ("dt=2026-11-23/hr=19" if place in ("time", "late") else None)
    assert parse_url(root, built["time"], LayoutSpec()) is None  # not this group's layout
    for stray in (f"{root}/backup/t/partition=4/1_3_{10:020d}.seq",  # folder != name
                  f"{root}/p/t/dt=2026-11-23/_SUCCESS", f"{root}/_runs/p/r/plan.json",
                  f"{root}/p/t/dt=2026-11-23/1_3_{10:020d}.seq",   # a day, not an hour
                  "s3://other/p/t/x.seq"):
        assert parse_url(root, stray, hourly if "/p/" in stray else LayoutSpec()) is None


def test_a_table_groups_files_sit_in_their_runs_folder_and_read_back():
    root = "s3://b/archive"
    url = layout.table_data_file(root, "tables", "orders.eu", "manual__2026-01-01T00:00:00+00:00",
                                 3, 1, 42, "parquet")
    assert url == ("s3://b/archive/tables/orders.eu/data/manual__2026-01-01T00_00_00_00_00/"
                   "partition=3/1_3_00000000000000000042.parquet")
    where = layout.parse_url(root, url, layout.LayoutSpec())
    assert (where.group, where.topic, where.place, where.name.partition, where.name.first_offset) == (
        "tables", "orders.eu", "partition", 3, 42)
    assert layout.parse_url(root, url.replace("partition=3", "partition=4"),
                            layout.LayoutSpec()) is None
