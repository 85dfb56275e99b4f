"""``envhub report`` and ``envhub view`` on the command line: a self-contained report,
CLI errors with codes for bad arguments, and token ids decoded with ``--tokenizer``."""

from __future__ import annotations

import html as html_module
import re
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from envhub.cli import app
from envhub.view.app import create_app
from envhub.view.token_text import load_decoder
from tests.rollout.scripted_server import ThreadedUvicorn
from tests.view.conftest import Viewer

runner = CliRunner()


def _report(viewer: Viewer, out: Path, episodes: int) -> str:
    """``envhub report`` of the scripted run into ``out``; the HTML it wrote."""
    result = runner.invoke(
        app,
        ["report", str(viewer.runs.scripted), "-o", str(out), "--episodes", str(episodes),
         "--cache-dir", str(out.parent / "cache")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return out.read_text()


def test_report_is_one_self_contained_file(viewer: Viewer, tmp_path: Path) -> None:
    out = tmp_path / "out" / "report.html"
    html = _report(viewer, out, 1)
    assert "<svg" in html and "<style>" in html and "Worst 1 episodes" in html
    assert "<script" not in html  # nothing to run, nothing to fetch
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    assert 'href="/' not in html  # links stay inside the file

    missing = runner.invoke(app, ["report", str(tmp_path / "nope.jsonl"), "-o", str(out)])
    assert missing.exit_code == 2 and "(not_found)" in missing.output

    every = _report(viewer, tmp_path / "every.html", 1000)  # worst meets best: shown once
    ids = re.findall(r'\bid="([^"]+)"', every)
    assert ids and len(ids) == len(set(ids)), "element ids repeat"


def test_view_and_report_without_the_view_extra_say_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # `import uvicorn` raises ImportError
    monkeypatch.setitem(sys.modules, "envhub.view.report", None)
    for args in (["view", str(tmp_path)], ["report", str(tmp_path), "-o", str(tmp_path / "r")]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert "(missing_extra)" in result.output and "envhub-rl[view]" in result.output


def test_view_refuses_arguments_it_cannot_show(tmp_path: Path) -> None:
    result = runner.invoke(app, ["view", str(tmp_path / "nope.jsonl"), str(tmp_path)])
    assert result.exit_code == 2
    assert "(not_found)" in result.output and "(is_directory)" in result.output
    assert "(no_runs)" in result.output
    bad = runner.invoke(app, ["view", str(tmp_path), "--tokenizer", str(tmp_path / "tok")])
    assert bad.exit_code == 2 and "(not_found)" in bad.output


def _byte_tokenizer(folder: Path) -> Path:
    """A tokenizer whose id ``i`` is the character ``chr(i)``: what the scripted server's
    stand-in tokenizer produces (the bytes of the message)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {chr(i): i for i in range(256)}
    fast = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="?")))
    fast.save_pretrained(str(folder))
    return folder


def test_tokenizer_decodes_the_token_view(viewer: Viewer, tmp_path: Path) -> None:
    decoder = load_decoder(_byte_tokenizer(tmp_path / "tokenizer"))
    index = viewer.catalog.index(0)
    episode = next(r for r in index.page(limit=20) if not r.masked)
    with ThreadedUvicorn(create_app(viewer.catalog, decoder)) as server:
        html = httpx.get(f"{server.url}/runs/0/episodes/{episode.id}").text
    texts = re.findall(r'<span class="tok"[^>]*title="p=[^"]*">([^<]*)</span>', html)
    decoded = html_module.unescape("".join(texts))  # the scripted ids are the bytes of:
    assert decoded.endswith('assistant||answer({"value": "20"})')
    assert "pass <code>--tokenizer PATH</code>" not in html
