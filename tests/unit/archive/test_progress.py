from kafka_archive.archive import progress

ROW = {"topic": "t", "partition": 3, "start": 10, "end": 15, "records": 5, "bytes": 2_000_000,
       "files": [{"url": "s3://b/r/backup/t/partition=3/1_3_00000000000000000010.seq",
                  "records": 5, "bytes": 2_000_000}]}


def test_one_line_per_slice_then_a_summary():
    empty = {"topic": "t", "partition": 0, "start": 0, "end": 2, "records": 0, "bytes": 0,
             "files": [], "quarantined": 0}
    lines = progress.lines({"run_id": "r1", "slices": [ROW, empty]}, 4.0)
    assert lines == [
        "slice t partition 0 offsets [0, 2): 0 records, 0 bytes -> no file (Kafka holds no "
        "message there)",
        "slice t partition 3 offsets [10, 15): 5 records, 2000000 bytes -> "
        "s3://b/r/backup/t/partition=3/1_3_00000000000000000010.seq",
        "archived run r1: 2 slices, 5 records, 2000000 bytes, 1 files in 4.0 s (0.5 MB/s)"]


def test_quarantined_and_many_files_are_named():
    row = {**ROW, "quarantined": 2, "files": [ROW["files"][0]] * 3}
    assert progress.slice_line(row).endswith("5 records, 2000000 bytes, 2 quarantined -> 3 files")


def test_the_summary_tells_the_session_start_from_the_job_itself():
    line = progress.summary_line({"run_id": "r1", "slices": [ROW]}, 10.0, startup_s=3.5)
    assert line.endswith("in 10.0 s (0.2 MB/s); Spark session 3.50 s, the job without it 6.50 s")
