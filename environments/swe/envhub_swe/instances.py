"""SWE-bench-format records -> envhub tasks, and what an episode needs to run one.

Two sources share one format: the shipped tasks (``data/tasks.jsonl``, made by
:mod:`envhub_swe.generate` from the catalog's repositories) and user SWE-bench JSONL
files whose images the user has (``swebench=`` option, ``image_template``). A record
keeps SWE-bench's keys; envhub's extras (``bug_patch``, ``gold_edits``, ``split``) are
optional.

The two are graded differently (:meth:`Instance.grade`): envhub's generated tasks
(``repo`` ``pypi/<name>``) with envhub's exact-id reading of the pytest log, SWE-bench
records with the ``swebench`` package's own parser and grader (SWE-bench 5's
``log_parser`` and ``eval_type`` keys are honoured), see :mod:`envhub.rewards.swe`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from envhub import GoldCall, Task, TaskSet
from envhub.errors import InvalidRequest
from envhub.rewards.swe import (
    Grade,
    grade_log,
    grade_swebench,
    swebench_eval_type,
    swebench_log_parser,
)
from envhub_swe.catalog import IMAGE_LAYOUT, Layout, RepoSpec, load_catalog
from envhub_swe.testrun import TestRun

__all__ = ["Instance", "load_instances", "to_task"]

SWEBENCH_IMAGE_TEMPLATE = "sweb.eval.x86_64.{instance_id}:latest"
_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/", re.MULTILINE)

PROMPT = """\
You are working in a Python repository checked out at {workdir} ({repo} {version}).
A user filed this issue:

<issue>
{problem_statement}
</issue>

Fix the issue by editing the repository's source files (not its tests). Tools:
`bash` runs a shell command in {workdir} (each call starts a fresh shell; no network),
`str_replace_editor` views and edits files, `run_tests` runs test files of the
repository. When you are done, call `submit`. Your change is graded by running the
repository's tests on a clean checkout with your diff applied."""


def _id_list(value: Any) -> list[str]:
    """SWE-bench on the Hub stores the test lists as JSON strings; files here as lists."""
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidRequest("FAIL_TO_PASS/PASS_TO_PASS must be lists of test ids")
    return value


@dataclass(frozen=True)
class Instance:
    """Everything an episode and its grading need, resolved from one record."""

    instance_id: str
    repo: RepoSpec
    layout: Layout
    image: str
    base_commit: str
    bug_patch: str
    test_patch: str
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    #: SWE-bench's parser and eval type for SWE-bench records; None: an envhub task
    log_parser: str | None = None
    eval_type: str = "pass_and_fail"

    def grade(self, run: TestRun) -> Grade:
        """The verdict on a test run: SWE-bench's own for SWE-bench records, envhub's
        for its generated tasks (the semantics their FAIL_TO_PASS lists were made with)."""
        if self.log_parser is None:
            return grade_log(run.log, self.fail_to_pass, self.pass_to_pass)
        return grade_swebench(
            run.log,
            self.fail_to_pass,
            self.pass_to_pass,
            exit_code=run.exit_code,
            timed_out=run.timed_out,
            log_parser=self.log_parser,
            eval_type=self.eval_type,
        )


def _is_generated(record: dict[str, Any]) -> bool:
    """envhub's own tasks name a catalog repository, ``pypi/<name>``."""
    return str(record["repo"]).startswith("pypi/")


def _swebench_grading(record: dict[str, Any]) -> tuple[str | None, str]:
    """``(log_parser, eval_type)`` of a record: None for envhub's tasks; SWE-bench's
    choice for SWE-bench records (needs the ``swebench`` extra)."""
    if _is_generated(record):
        return None, "pass_and_fail"
    parser = swebench_log_parser(str(record["repo"]), record.get("log_parser"))
    return parser, swebench_eval_type(record.get("eval_type"))


def test_patch_files(test_patch: str) -> list[str]:
    return sorted(set(_DIFF_FILE.findall(test_patch)))


def _record_repo(record: dict[str, Any]) -> RepoSpec:
    """The catalog entry for shipped tasks; an ad-hoc spec for SWE-bench instances
    (tests: the files the test patch touches, else those holding the graded tests)."""
    repo_id = record["repo"]
    if _is_generated(record):
        return load_catalog().get(repo_id.removeprefix("pypi/"))
    files = test_patch_files(record.get("test_patch") or "") or sorted(
        {t.split("::")[0] for t in _id_list(record["FAIL_TO_PASS"])}
    )
    return RepoSpec(
        name=repo_id,
        version=str(record.get("version", "")),
        sha256="",
        tests=files,
        sources=[],
    )


def resolve_instance(task: Task, *, image_template: str | None, layout: Layout | None) -> Instance:
    """The episode plan of a task (images of catalog repositories are content-addressed,
    so their tag is computed here, not stored)."""
    record = task.metadata
    repo = _record_repo(record)
    log_parser, eval_type = _swebench_grading(record)
    if _is_generated(record) and image_template is None:
        from envhub_swe.images import image_name

        image = image_name(repo)
    else:
        template = image_template or record.get("image") or SWEBENCH_IMAGE_TEMPLATE
        image = template.format(
            instance_id=record["instance_id"].lower(),
            repo=record["repo"],
            version=record.get("version", ""),
        )
    return Instance(
        instance_id=record["instance_id"],
        repo=repo,
        layout=layout or IMAGE_LAYOUT,
        image=image,
        base_commit=record["base_commit"],
        bug_patch=record.get("bug_patch") or "",
        test_patch=record.get("test_patch") or "",
        fail_to_pass=_id_list(record["FAIL_TO_PASS"]),
        pass_to_pass=_id_list(record["PASS_TO_PASS"]),
        log_parser=log_parser,
        eval_type=eval_type,
    )


def to_task(record: dict[str, Any], workdir: str = "/work") -> Task:
    """One SWE-bench record as an envhub task (gold actions: the editor edits, if any)."""
    for key in ("instance_id", "repo", "base_commit", "FAIL_TO_PASS", "PASS_TO_PASS"):
        if key not in record:
            raise InvalidRequest(f"SWE-bench record lacks {key!r}")
    gold = [GoldCall(name="str_replace_editor", arguments=e) for e in record.get("gold_edits", [])]
    if not gold and record.get("patch"):
        gold = [GoldCall(name="bash", arguments={"command": _apply_command(record["patch"])})]
    if gold:
        gold.append(GoldCall(name="submit"))
    prompt = PROMPT.format(
        workdir=workdir,
        repo=record["repo"].removeprefix("pypi/"),
        version=record.get("version", ""),
        problem_statement=record.get("problem_statement", "").strip(),
    )
    return Task(
        id=record["instance_id"],
        prompt=[{"role": "user", "content": prompt}],
        gold_actions=gold,
        split=record.get("split", "test"),
        metadata=record,
    )


def _apply_command(patch: str) -> str:
    """A bash command applying ``patch`` (the gold action of a SWE-bench instance)."""
    marker = "ENVHUB_PATCH_EOF"
    return f"cat > .git/gold.patch <<'{marker}'\n{patch}{marker}\ngit apply .git/gold.patch"


def _read_jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_instances(path: str | None = None) -> TaskSet:
    """The shipped tasks, or a user's SWE-bench JSONL file (whose grading is checked
    here, so a missing ``swebench`` extra or an unsupported parser fails at load)."""
    if path is None:
        text = resources.files("envhub_swe").joinpath("data/tasks.jsonl").read_text("utf-8")
    else:
        p = Path(path)
        if not p.is_file():
            raise InvalidRequest(f"no SWE-bench file at {path}")
        text = p.read_text("utf-8")
    records = _read_jsonl(text)
    for record in records:
        if "repo" in record:
            _swebench_grading(record)
    return TaskSet(to_task(r) for r in records)
