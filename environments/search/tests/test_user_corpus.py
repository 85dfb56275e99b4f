"""Bring-your-own corpus and questions in Search-R1's JSONL layouts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from envhub_search.corpus import CorpusOptions, _materialise

import envhub
from envhub import TaskSet
from envhub.errors import InvalidRequest
from envhub.testing import check_environment

DOCS = [
    {"id": "d1", "title": "Quokka", "text": "The quokka is a small macropod. " * 40
     + "Quokkas live on Rottnest Island near Perth."},
    {"id": "d2", "contents": '"Rottnest Island"\nRottnest Island lies off the coast of Perth.'},
    {"id": 3, "title": "Numbat", "text": "The numbat eats termites."},
    {"id": "notes#7", "title": "Field notes", "text": "Seen near the lighthouse."},
]
QUESTIONS = [
    {"id": "q1", "question": "Where do quokkas live?", "golden_answers": ["Rottnest Island"],
     "gold_passages": ["d1#2"]},
    {"question": "What does the numbat eat?", "answers": "termites", "split": "test"},
]


def _write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


@pytest.fixture
def files(tmp_path) -> tuple[str, str]:
    return _write(tmp_path / "docs.jsonl", DOCS), _write(tmp_path / "qa.jsonl", QUESTIONS)


def test_user_corpus_and_questions(files) -> None:
    docs, qa = files
    env = envhub.make("search", corpus=docs, tasks=qa)
    assert [t.id for t in env.tasks] == ["q1", "user-000002"]
    assert env.tasks.get("user-000002").split == "test"
    assert env.tasks.get("q1").answer == ["Rottnest Island"]
    report = check_environment(env)
    assert report.checked == 2


async def test_user_corpus_is_searchable(call, files) -> None:
    docs, qa = files
    env = envhub.make("search", corpus=docs, tasks=qa)
    session = await env.open("q1")
    obs = await call(session, "search", query="quokka Rottnest")
    assert "id=d1#2 title='Quokka'" in obs.content
    assert "title='Rottnest Island'" in obs.content  # "contents" form: title on line one
    opened = await call(session, "open", doc_id="3")
    assert opened.content == "# Numbat (id=3)\n\nThe numbat eats termites."
    for doc_id in ("notes#7", "notes#7#0"):  # "#" inside a document id is fine
        opened = await call(session, "open", doc_id=doc_id)
        assert opened.content.startswith("# Field notes (id=notes#7)")
    await call(session, "answer", text="rottnest island")
    closed = await session.close()
    assert closed.reward == 1.0 and closed.components["retrieved_gold"] == 1.0
    session = await env.open("user-000002")  # no gold passages: no retrieval metric
    await call(session, "answer", text="ants")
    closed = await session.close()
    assert closed.reward == 0.0 and "retrieved_gold" not in closed.components


def test_user_questions_on_the_shipped_corpus(tmp_path) -> None:
    qa = _write(tmp_path / "qa.jsonl", [{"question": "What is the capital of France?",
                                        "golden_answers": ["Paris"]}])
    env = envhub.make("search", tasks=qa)
    assert len(env.tasks) == 1
    check_environment(env)


@pytest.mark.parametrize(("docs", "qa", "message"), [
    ([{"id": "a", "text": "x"}], None, "corpus= needs tasks="),
    ([{"id": "a", "text": "x"}, {"id": "a", "text": "y"}], [], "duplicate document id 'a'"),
    ([{"title": "no id", "text": "x"}], [], "needs an 'id'"),
    ([{"id": "a", "title": "no text"}], [], "needs 'text'"),
    ([{"id": "a", "text": "x"}], [{"question": "no answer"}], "needs 'question' and"),
    ([{"id": "a", "text": "x"}], [], "no questions"),
])
def test_bad_user_files_are_typed_errors(tmp_path, docs, qa, message: str) -> None:
    options = {"corpus": _write(tmp_path / "docs.jsonl", docs)}
    if qa is not None:
        options["tasks"] = _write(tmp_path / "qa.jsonl", qa)
    with pytest.raises(InvalidRequest, match=message):
        _ = envhub.make("search", **options).tasks


def test_malformed_json_names_the_line(tmp_path) -> None:
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"id": "a", "text": "x"}\n{not json\n', encoding="utf-8")
    qa = _write(tmp_path / "qa.jsonl", QUESTIONS)
    with pytest.raises(InvalidRequest, match=r"docs.jsonl:2: not valid JSON"):
        _ = envhub.make("search", corpus=str(docs), tasks=qa).tasks
    with pytest.raises(InvalidRequest, match="cannot read"):
        _ = envhub.make("search", corpus=str(tmp_path / "missing.jsonl"), tasks=qa).tasks


def test_editing_a_user_file_gives_a_new_build(files, tmp_path) -> None:
    """A process loads a corpus once; the next process sees the edit (new cache key)."""
    docs, qa = files
    options = CorpusOptions(corpus=docs, tasks=qa)
    first = _materialise(options, tmp_path)
    _write(Path(qa), QUESTIONS[:1])
    second = _materialise(CorpusOptions(corpus=docs, tasks=qa), tmp_path)
    assert second != first
    assert len(TaskSet.from_jsonl(second / "tasks.jsonl")) == 1
