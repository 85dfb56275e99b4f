"""Bug injection: each operator changes what it should, gold edits undo it exactly."""

from __future__ import annotations

import random

import libcst as cst
import pytest
from envhub_swe.generate import gold_edits, unified_patch
from envhub_swe.mutations import KINDS, apply_sites, find_sites

SOURCE = '''\
def window(seq, n, strict=True):
    """Docstring stays."""
    out = []
    for i in range(len(seq) - n):
        if strict and n > 0:
            out.append(seq[i : i + n])
        total = n * 2
    return out


def check(x):
    return x is None or x in (1, 2)


LIMIT = 10  # module level: never mutated
'''

EXPECTED = {
    "flip_comparison": "if strict and n <= 0:",
    "flip_boolean": "if strict or n > 0:",
    "change_operator": "total = n // 2",
    "off_by_one": "for i in range(len(seq) - n + 1):",
    "drop_condition": "if strict:",
    "negate_condition": "if not (strict and n > 0):",
    "swap_arguments": None,  # no call with two positional arguments here
    "change_constant": "if strict and n > 1:",
    "change_return": "return None",
    "drop_statement": None,  # checked below
}


def _mutants(kind: str) -> list[str]:
    module = cst.parse_module(SOURCE)
    return [apply_sites(module, [s]) for s in find_sites(module) if s.kind == kind]


@pytest.mark.parametrize("kind", [k for k, v in EXPECTED.items() if v])
def test_each_kind_makes_its_change(kind: str) -> None:
    mutants = _mutants(kind)
    assert any(EXPECTED[kind] in m for m in mutants), mutants
    for m in mutants:
        compile(m, "<mutant>", "exec")
        assert "LIMIT = 10  # module level" in m and '"""Docstring stays."""' in m


def test_drop_statement_keeps_the_block_valid_and_the_kind_list_is_complete() -> None:
    mutants = _mutants("drop_statement")
    assert any("out.append" not in m for m in mutants)
    for m in mutants:
        compile(m, "<mutant>", "exec")
    module = cst.parse_module(SOURCE)
    assert {s.kind for s in find_sites(module)} <= set(KINDS)
    # flipping one comparison of a chain keeps the rest (formatting included)
    assert "x is not None or x in (1, 2)" in "".join(_mutants("flip_comparison"))


def test_gold_edits_are_unique_and_restore_the_source() -> None:
    rng = random.Random(0)
    module = cst.parse_module(SOURCE)
    sites = find_sites(module)
    for _ in range(20):
        chosen = [s for s in rng.sample(sites, 2) if s.function == "window"][:1] + [
            s for s in sites if s.function == "check"
        ][:1]
        buggy = apply_sites(module, chosen)
        if buggy == SOURCE:
            continue
        text = buggy
        for edit in gold_edits("m.py", buggy, SOURCE):
            assert text.count(edit["old_str"]) == 1
            text = text.replace(edit["old_str"], edit["new_str"], 1)
        assert text == SOURCE


def test_unified_patch_has_git_headers() -> None:
    patch = unified_patch("pkg/m.py", "a\nb\n", "a\nc\n")
    assert patch.startswith("diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n")
    assert "-b\n+c\n" in patch
