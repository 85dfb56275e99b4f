"""The run index: a 100,000-trajectory file is read once, then pages and filters are
answered from sqlite without reading trajectories; a file that grows is followed by
offset, a replaced one is indexed again; bad lines are named and the rest indexed."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import httpx
import pytest

from envhub.errors import InvalidRequest
from envhub.rollout.summary import summarize
from envhub.trajectory import latest_records
from envhub.view import index as index_module
from envhub.view.filters import EpisodeFilter
from envhub.view.index import RunIndex
from tests.view.conftest import BROKEN_LINES, Viewer
from tests.view.runs import big_run, minimal_record

BIG = 100_000


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("big")
    big_run(root / "big.jsonl", BIG)
    return root / "big.jsonl", root / "cache"


def test_a_big_file_pages_and_filters_from_the_index_alone(
    big: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, cache = big
    index = RunIndex(path, cache)
    assert index.state().episodes == 0  # opening reads nothing
    assert index.refresh(max_bytes=4 << 20)  # a bounded read, as a page request does
    assert index.state().behind and 0 < index.state().episodes < BIG
    assert index.refresh()
    assert index.state().episodes == BIG and index.state().problems == 0
    assert not index.state().behind

    parsed: list[int] = []
    original = index_module._parse

    def counting(raw: bytes) -> object:
        if threading.current_thread() is threading.main_thread():  # not a viewer's follower
            parsed.append(len(raw))
        return original(raw)

    monkeypatch.setattr(index_module, "_parse", counting)
    again = RunIndex(path, cache)  # a second viewer: the index on disk, nothing re-read
    assert not again.refresh()
    assert again.state().episodes == BIG and parsed == []

    first = again.page(limit=50)
    assert [r.line for r in first] == list(range(1, 51))
    late = again.page(order="line", offset=99_950, limit=50)
    assert [r.line for r in late] == list(range(99_951, 100_001))
    where = EpisodeFilter(tool="answer", reward_min=0.5, turns_max=2, stop_reason="max_turns")
    expected = [
        i for i in range(BIG)
        if i % 3 == 0 and i % 50 != 7 and (i % 10) / 10 >= 0.5 and 1 + i % 5 <= 2 and i % 4 == 0
    ]  # fmt: skip
    assert again.count(where) == len(expected) > 0
    assert [r.line - 1 for r in again.page(where, limit=20)] == expected[:20]
    masked = len([i for i in range(BIG) if i % 50 == 7])
    assert again.count(EpisodeFilter(masked=True)) == masked
    assert again.count(EpisodeFilter(error_kind="policy_error", task="task-0000")) == len(
        [i for i in range(BIG) if i % 50 == 7 and i % 1000 < 10]
    )
    assert parsed == []  # paging and filtering read no line of the file

    record = again.record(late[-1].id)  # an episode page reads its one line
    assert record["trajectory_id"] == f"t{BIG - 1}" and len(parsed) == 1
    summary = summarize(again.summary_records())
    assert summary.episodes == BIG and summary.tasks == 1000
    assert summary.pass_at_k.keys() >= {"pass@1", "pass@100"}
    again.close()
    index.close()


def test_growing_replaced_and_repeated_records(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    lines = [minimal_record(i, tasks=3) for i in range(4)]  # i=3 repeats task 0, sample 1
    import orjson

    encoded = [orjson.dumps(r) + b"\n" for r in lines]
    path.write_bytes(encoded[0])
    index = RunIndex(path, tmp_path / "cache")
    index.refresh()
    assert index.state().episodes == 1
    with open(path, "ab") as fh:
        fh.write(encoded[1][:10])
    assert index.refresh() and index.state().pending_bytes == 10
    assert index.state().episodes == 1
    with open(path, "ab") as fh:
        fh.write(encoded[1][10:] + encoded[2])
    index.refresh()
    assert index.state().episodes == 3 and index.state().pending_bytes == 0
    assert not index.refresh()  # nothing new: nothing read

    again = dict(lines[0], trajectory_id="rerun", reward=0.9)  # a resumed run re-ran it
    with open(path, "ab") as fh:
        fh.write(orjson.dumps(again))  # a complete last record without its newline
    index.refresh()
    assert index.state().episodes == 3  # the latest record of the pair replaced the first
    rows = index.find(lines[0]["task_id"])  # type: ignore[arg-type]
    assert [index.record(r.id)["trajectory_id"] for r in rows] == ["rerun"]
    assert index.summary_records() and summarize(index.summary_records()).episodes == len(
        list(latest_records(path))
    )

    other = dict(lines[1], trajectory_id="rerun-2")
    with open(path, "ab") as fh:
        fh.write(b"\n" + orjson.dumps(other) + b"\n")  # the writer ends that line, then one more
    index.refresh()
    assert [r.line for r in index.find(other["task_id"])] == [5]  # type: ignore[arg-type]
    assert [r.line for r in index.find(lines[0]["task_id"])] == [4]  # type: ignore[arg-type]

    generation = index.state().generation
    replacement = tmp_path / "new.jsonl"
    replacement.write_bytes(encoded[2])
    os.replace(replacement, path)  # what compact_trajectories does
    index.refresh()
    assert index.state().episodes == 1 and index.state().generation == generation + 1
    index.close()


def test_request_latencies_are_every_turn_of_the_current_episodes(viewer: Viewer) -> None:
    index = viewer.catalog.index(0)  # the scripted run: 3-turn episodes, one masked
    expected = [t["latency_s"] for r in latest_records(viewer.runs.scripted) for t in r["turns"]]
    assert len(expected) > index.state().episodes  # more requests than episodes
    assert sorted(index.request_latencies()) == sorted(expected)


def test_bad_lines_are_named_and_the_rest_is_indexed(viewer: Viewer) -> None:
    index = viewer.catalog.index(2)
    state = index.state()
    assert state.episodes == BROKEN_LINES
    assert state.pending_bytes > 0  # the torn last line
    codes = [(p.line, p.code) for p in index.problems()]
    assert codes == [(2, "not_json"), (3, "not_utf8"), (4, "unknown_schema_version")]

    page = httpx.get(f"{viewer.url}/runs/2").text
    assert "not_utf8" in page and "unknown_schema_version" in page and "unfinished" in page
    assert 'id="episodes">2<' in page
    episodes = httpx.get(f"{viewer.url}/api/runs/2/episodes").json()
    assert episodes["total"] == 2 and [e["line"] for e in episodes["episodes"]] == [1, 5]
    one = httpx.get(f"{viewer.url}/runs/2/episodes/{episodes['episodes'][1]['id']}")
    assert one.status_code == 200 and "Conversation" in one.text


def test_missing_files_directories_and_bad_requests_answer_with_codes(viewer: Viewer) -> None:
    runs = httpx.get(f"{viewer.url}/").text
    assert "not_found" in runs and "is_directory" in runs and "a-directory/*.jsonl" in runs
    for url, status, code in [
        ("/runs/4", 404, "not_found"),
        ("/runs/5", 404, "is_directory"),
        ("/runs/99", 404, "unknown_run"),
        ("/runs/0/episodes/999999", 404, "unknown_episode"),
        ("/runs/0/episodes?reward_min=high", 400, "invalid_request"),
        ("/runs/0/episodes?colour=red", 400, "invalid_request"),
        ("/runs/0/episodes?sort=random", 400, "invalid_request"),
    ]:
        reply = httpx.get(viewer.url + url)
        assert (reply.status_code, code in reply.text) == (status, True), url
    api = httpx.get(f"{viewer.url}/api/runs/99/episodes")
    assert api.status_code == 404 and api.json()["error"]["code"] == "unknown_run"


def test_requests_naming_another_host_are_refused(viewer: Viewer) -> None:
    """DNS rebinding: a page of evil.example re-pointed at 127.0.0.1 must not read runs."""
    assert httpx.get(viewer.url, headers={"Host": "evil.example"}).status_code == 400
    assert httpx.get(f"{viewer.url}/api/poll", headers={"Host": "evil.example"}).status_code == 400
    assert httpx.get(viewer.url, headers={"Host": "localhost:1"}).status_code == 200


def test_a_failed_refresh_leaves_no_transaction_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orjson

    path = tmp_path / "run.jsonl"
    path.write_bytes(orjson.dumps(minimal_record(0, tasks=1)) + b"\n")
    index = RunIndex(path, tmp_path / "cache")

    def fail(*args: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(index, "_index_line", fail)
    with pytest.raises(RuntimeError):
        index.refresh()
    monkeypatch.undo()
    assert index.refresh() and index.state().episodes == 1  # not "already in a transaction"
    index.close()


def test_a_missing_file_or_a_directory_is_refused_with_a_code(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest) as missing:
        RunIndex(tmp_path / "nope.jsonl", tmp_path / "cache")
    assert missing.value.code == "not_found"
    with pytest.raises(InvalidRequest) as folder:
        RunIndex(tmp_path, tmp_path / "cache")
    assert folder.value.code == "is_directory"


def test_truncation_errors_and_non_json_arguments_are_marked(
    viewer: Viewer, tmp_path: Path
) -> None:
    import orjson

    from envhub.view.app import create_app
    from envhub.view.catalog import Catalog
    from tests.rollout.scripted_server import ThreadedUvicorn

    record = orjson.loads(viewer.runs.reference.read_bytes().splitlines()[0])
    tool = next(m for m in record["messages"] if m["role"] == "tool")
    assert tool["truncated"] is False and tool["is_error"] is False  # recorded, not guessed
    tool["content"] = "Error: head\n[truncated 5000 chars]\ntail"  # what a tool printed
    assistant = next(m for m in record["messages"] if m.get("tool_calls"))
    assistant["tool_calls"][0]["function"]["arguments"] = "{not json"
    paths = []
    # the session cut it; a tool printed the marker itself; a record from before the flag
    for name, flag in (("cut", True), ("printed", False), ("old", None)):
        tool.pop("truncated")
        if flag is not None:
            tool["truncated"] = flag
        else:
            tool.pop("is_error")
        paths.append(tmp_path / f"{name}.jsonl")
        paths[-1].write_bytes(orjson.dumps(record) + b"\n")
    catalog = Catalog(paths, tmp_path / "cache")
    with ThreadedUvicorn(create_app(catalog)) as server:
        cut, printed, old = (httpx.get(f"{server.url}/runs/{i}/episodes/1").text for i in range(3))
    catalog.close()
    assert '<mark class="trunc">[truncated 5000 chars]</mark>' in cut
    assert "arguments are not JSON" in cut and "{not json" in cut
    assert '<mark class="trunc">' not in printed and "[truncated 5000 chars]" in printed
    assert '<mark class="trunc">[truncated 5000 chars]</mark>' in old
    error_tag = '<span class="tag bad is-error">'
    assert error_tag not in cut and error_tag not in printed and error_tag in old


def test_pages_answer_while_a_big_file_is_still_being_indexed(tmp_path: Path) -> None:
    from envhub.view.app import create_app
    from envhub.view.catalog import CHUNK_BYTES, Catalog
    from tests.rollout.scripted_server import ThreadedUvicorn

    path = tmp_path / "run.jsonl"
    big_run(path, 20_000)
    assert path.stat().st_size > 2 * CHUNK_BYTES  # more than the open and one request read
    catalog = Catalog([path], tmp_path / "cache")  # reads one chunk
    with ThreadedUvicorn(create_app(catalog)) as server:  # no follower thread: requests read
        page = httpx.get(f"{server.url}/runs/0").text
        assert 'id="indexing"' in page and "% indexed" in page
        shown = int(page.split('id="episodes">')[1].split("<")[0])
        assert 0 < shown < 20_000
        for _ in range(30):
            if not httpx.get(f"{server.url}/api/poll").json()["runs"][0]["behind"]:
                break
        page = httpx.get(f"{server.url}/runs/0").text
    catalog.close()
    assert 'id="indexing"' not in page and 'id="episodes">20000<' in page


def test_the_follower_reads_no_chunk_while_a_page_request_is_answered(tmp_path: Path) -> None:
    from envhub.view.catalog import CHUNK_BYTES, Catalog

    path = tmp_path / "run.jsonl"
    big_run(path, 20_000)
    catalog = Catalog([path], tmp_path / "cache")  # reads one chunk
    first = catalog.index(0, refresh=False).state().indexed_bytes
    assert 0 < first < 2 * CHUNK_BYTES < path.stat().st_size  # a chunk, to a line's end
    stop = threading.Event()
    follower = threading.Thread(target=catalog.follow, args=(stop.is_set,), daemon=True)
    try:
        with catalog.serving():
            follower.start()
            stop.wait(0.5)  # time for several chunks, were it reading
            assert catalog.index(0, refresh=False).state().indexed_bytes == first
        for _ in range(200):  # answered: the follower reads on to the end
            if not catalog.index(0, refresh=False).state().behind:
                break
            stop.wait(0.05)
        assert catalog.index(0, refresh=False).state().episodes == 20_000
    finally:
        stop.set()
        follower.join(10)
        catalog.close()
