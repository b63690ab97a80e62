import multiprocessing
from pathlib import Path

import pytest

from kafka_archive.errors import TerminalError
from kafka_archive.tokens import (LocalTokenStore, MalformedTokenError, S3TokenStore, Token,
                                  TokenConflictError, Versioned, open_store, parse, render)

TOKEN = Token(group="backup", topic="orders.v1_eu-west", bootstrap="broker:9092",
              offsets={2: 7, 0: 42, 1: 0}, committed_at="2024-05-01T12:00:00+00:00",
              run_id="scheduled__2024-05-01T12:00:00+00:00")


def _parse(text: str, path: str = "/tokens/backup/t.token") -> Token:
    return parse(text, path=path, group="backup", topic="t")


def test_render_is_headers_then_lines_sorted_by_partition():
    assert render(TOKEN) == (
        "# group: backup\n"
        "# topic: orders.v1_eu-west\n"
        "# committed_at: 2024-05-01T12:00:00+00:00\n"
        "# run_id: scheduled__2024-05-01T12:00:00+00:00\n"
        "broker:9092 orders.v1_eu-west 0 42\n"
        "broker:9092 orders.v1_eu-west 1 0\n"
        "broker:9092 orders.v1_eu-west 2 7\n")


def test_parse_round_trips_render():
    assert parse(render(TOKEN), path="p", group=TOKEN.group, topic=TOKEN.topic) == TOKEN


def test_blank_lines_comments_and_missing_optional_headers_are_fine():
    token = _parse("\n# a comment\n\nb:9092 t 1 5\n   \n# topic: t\nb:9092 t 0 3\n")
    assert token == Token(group="backup", topic="t", bootstrap="b:9092", offsets={0: 3, 1: 5})


def test_a_token_whose_lines_were_all_deleted_has_no_partitions():
    assert _parse("# group: backup\n# topic: t\n").offsets == {}


@pytest.mark.parametrize("text, line, problem", [
    ("b t 0\n", 1, "separated by single spaces"),
    ("b t 0 1 extra\n", 1, "separated by single spaces"),
    ("# topic: t\nb  t 0 1\n", 2, "separated by single spaces"),
    ("b t x 1\n", 1, "partition 'x' is not a non-negative integer"),
    ("b t 0 -1\n", 1, "offset '-1' is not a non-negative integer"),
    ("b t -3 1\n", 1, "partition '-3'"),
    ("b t 0 1.5\n", 1, "offset '1.5'"),
    ("\nb other 0 1\n", 2, "topic 'other' differs from the file's topic 't'"),
    ("b t 0 1\nb t 1 1\nb t 0 2\n", 3, "duplicate partition 0"),
    ("b1 t 0 1\nb2 t 1 1\n", 2, "bootstrap 'b2' differs from 'b1'"),
    ("# group: partitioned\n", 1, "header says group 'partitioned'"),
    ("# topic: other\n", 1, "header says topic 'other'"),
])
def test_malformed_tokens_name_file_line_and_problem(text, line, problem):
    with pytest.raises(MalformedTokenError) as excinfo:
        _parse(text)
    assert excinfo.value.path == "/tokens/backup/t.token"
    assert excinfo.value.line == line
    assert f"/tokens/backup/t.token, line {line}: " in str(excinfo.value)
    assert problem in str(excinfo.value)
    assert isinstance(excinfo.value, TerminalError)


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a b", "ü"])
def test_bad_group_and_topic_names_are_refused(name, tmp_path):
    with pytest.raises(TerminalError, match="invalid group name"):
        LocalTokenStore(tmp_path).read(name, "t")
    with pytest.raises(TerminalError, match="invalid topic name"):
        Token(group="g", topic=name, bootstrap="b", offsets={})


@pytest.mark.parametrize("changes", [
    {"bootstrap": "two words"}, {"bootstrap": ""}, {"bootstrap": "#b"},
    {"offsets": {0: -1}}, {"offsets": {-1: 0}}, {"run_id": "a\nb"}, {"committed_at": " x"},
])
def test_tokens_that_would_not_parse_back_cannot_be_built(changes):
    fields = {"group": "g", "topic": "t", "bootstrap": "b", "offsets": {0: 1}, **changes}
    with pytest.raises(TerminalError):
        Token(**fields)


# --- the local store ---

def test_missing_token_reads_as_absent(tmp_path):
    assert LocalTokenStore(tmp_path).read("backup", "t") == Versioned(None, None)


def test_write_creates_then_reads_back_with_its_version(tmp_path):
    store = LocalTokenStore(tmp_path)
    version = store.write(TOKEN, None)
    assert store.read(TOKEN.group, TOKEN.topic) == Versioned(TOKEN, version)
    assert (tmp_path / "backup/orders.v1_eu-west.token").read_text() == render(TOKEN)


def test_second_create_is_a_conflict_and_changes_nothing(tmp_path):
    store = LocalTokenStore(tmp_path)
    version = store.write(TOKEN, None)
    with pytest.raises(TokenConflictError) as excinfo:
        store.write(_advanced(TOKEN), None)
    assert (excinfo.value.group, excinfo.value.topic) == ("backup", "orders.v1_eu-west")
    assert (excinfo.value.expected, excinfo.value.found) == (None, version)
    assert store.read(TOKEN.group, TOKEN.topic) == Versioned(TOKEN, version)


def test_write_with_stale_version_is_a_conflict_and_changes_nothing(tmp_path):
    store = LocalTokenStore(tmp_path)
    stale = store.write(TOKEN, None)
    current = store.write(_advanced(TOKEN), stale)
    with pytest.raises(TokenConflictError, match=f"expected version {stale}, found {current}"):
        store.write(_advanced(_advanced(TOKEN)), stale)
    assert store.read(TOKEN.group, TOKEN.topic) == Versioned(_advanced(TOKEN), current)


def test_replacing_a_deleted_token_is_a_conflict(tmp_path):
    store = LocalTokenStore(tmp_path)
    version = store.write(TOKEN, None)
    store.delete(TOKEN.group, TOKEN.topic)
    with pytest.raises(TokenConflictError, match="found <absent>"):
        store.write(TOKEN, version)
    assert store.read(TOKEN.group, TOKEN.topic) == Versioned(None, None)


def test_no_temp_files_are_left_behind(tmp_path):
    store = LocalTokenStore(tmp_path)
    version = store.write(TOKEN, None)
    store.write(_advanced(TOKEN), version)
    with pytest.raises(TokenConflictError):
        store.write(TOKEN, version)
    assert sorted(p.name for p in (tmp_path / "backup").iterdir()) == [
        ".orders.v1_eu-west.token.lock", "orders.v1_eu-west.token"]


def _race(root: Path, offset: int, barrier, results) -> None:
    token = Token(group="backup", topic="t", bootstrap="b", offsets={0: offset})
    store = LocalTokenStore(root)
    expected = store.read("backup", "t").version
    barrier.wait()
    try:
        store.write(token, expected)
        results.put(("won", offset))
    except TokenConflictError:
        results.put(("lost", offset))


def test_two_processes_racing_from_the_same_version_exactly_one_wins(tmp_path):
    LocalTokenStore(tmp_path).write(Token("backup", "t", "b", {0: 1}), None)
    context = multiprocessing.get_context("fork")  # the racers are plain functions of this module
    for round_ in range(5):  # a few rounds make a broken lock likely to show
        barrier, results = context.Barrier(2), context.Queue()
        racers = [context.Process(target=_race, args=(tmp_path, 100 * round_ + n, barrier, results))
                  for n in (2, 3)]
        for racer in racers:
            racer.start()
        outcomes = sorted(results.get(timeout=30) for _ in racers)
        for racer in racers:
            racer.join(timeout=30)
            assert racer.exitcode == 0
        assert [outcome for outcome, _ in outcomes] == ["lost", "won"]
        winner = outcomes[1][1]
        assert LocalTokenStore(tmp_path).read("backup", "t").token.offsets == {0: winner}


def test_malformed_file_is_an_error_naming_it_never_absent(tmp_path):
    path = tmp_path / "backup" / "t.token"
    path.parent.mkdir()
    path.write_text("# topic: t\nb t 0 oops\n")
    with pytest.raises(MalformedTokenError, match=f"{path}, line 2: offset 'oops'"):
        LocalTokenStore(tmp_path).read("backup", "t")


def test_bytes_that_are_not_utf8_are_malformed_at_their_line(tmp_path):
    path = tmp_path / "backup" / "t.token"
    path.parent.mkdir()
    path.write_bytes(b"b t 0 1\nb t 1 \xff\n")
    with pytest.raises(MalformedTokenError, match="line 2: not UTF-8"):
        LocalTokenStore(tmp_path).read("backup", "t")


def test_delete_then_read_is_absent_and_delete_of_absent_is_fine(tmp_path):
    store = LocalTokenStore(tmp_path)
    store.write(TOKEN, None)
    store.delete(TOKEN.group, TOKEN.topic)
    assert store.read(TOKEN.group, TOKEN.topic) == Versioned(None, None)
    store.delete(TOKEN.group, TOKEN.topic)


def test_topics_lists_token_files_of_the_group_only(tmp_path):
    store = LocalTokenStore(tmp_path)
    assert store.topics("backup") == []
    for topic in ("b.x", "a-y", "c_z"):
        store.write(Token("backup", topic, "b", {0: 1}), None)
    store.write(Token("partitioned", "other", "b", {0: 1}), None)
    store.delete("backup", "c_z")
    assert store.topics("backup") == ["a-y", "b.x"]


def test_open_store_picks_the_backend_from_the_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    local = open_store("offsets/", s3_client_factory=lambda: pytest.fail("no S3 client needed"))
    assert isinstance(local, LocalTokenStore) and local.root == tmp_path / "offsets"
    assert open_store(f"file://{tmp_path}/x", lambda: None).root == tmp_path / "x"
    client = object()
    s3 = open_store("s3://bucket/tokens", lambda: client)
    assert isinstance(s3, S3TokenStore) and s3.storage.s3 is client


def _advanced(token: Token) -> Token:
    return Token(token.group, token.topic, token.bootstrap,
                 {p: o + 10 for p, o in token.offsets.items()})
