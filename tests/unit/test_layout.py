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
