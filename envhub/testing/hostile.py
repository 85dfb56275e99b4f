"""What a hostile model sends: one corpus for every plugin's hostile-answer suite.

A model's answer and tool-call arguments reach scorers, parsers and ``eval``-s that envhub
did not write (Reasoning Gym's sympy, BFCL's checker, SQL engines, shells). Every plugin
runs the same corpus through its public interface with
:func:`envhub.testing.check_hostile_answers`: the episode is scored (never masked), the
reward is the one the official scorer gives a plain wrong answer, no file appears outside
the sandbox, and episodes scored afterwards get the rewards of a clean run.

Strings may contain ``{marker}``: the checker replaces it with a fresh path outside any
sandbox and fails if that path exists afterwards (the injected code ran on the host).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["HOSTILE_ANSWERS", "deeply_nested_json", "hostile_answers"]

_DEPTH = 1000

#: code injection (Python, sympy's parse_expr transformations, shell, SQL), reply-channel
#: forgeries, huge and deeply nested values, and text that is not valid UTF-8
HOSTILE_ANSWERS: tuple[str, ...] = (
    # Python and sympy: exec/eval reached through parse_expr's factorial and implicit
    # multiplication transformations, attribute walks to builtins, imports
    "exec(\"open('{marker}','w').write('x')\")!",
    "exec(\"open('{marker}','w').write('x')\")",
    "eval(\"open('{marker}','w').write('x')\")!",
    "__import__('os').system('touch {marker}')",
    "().__class__.__base__.__subclasses__()",
    "open('{marker}','w').write('x')",
    "x!*exec(\"import os;os.system('touch {marker}')\")",
    "lambda: __import__('os').system('touch {marker}')",
    "Symbol('x').__class__.__init__.__globals__",
    "getattr(__builtins__, 'exec')(\"open('{marker}','w')\")",
    "[c for c in ().__class__.__mro__[1].__subclasses__()]",
    "exec(bytes([111,112,101,110]).decode())",
    "Function('exec')(\"open('{marker}','w')\")",
    # the reply channel: a line a worker's parent might take for a score
    '{"score": 1.0}',
    '\n{"score": 1.0}\n',
    "print('{\"score\": 1.0}')",
    'exec("import sys;sys.stdout.write(\'{\\"score\\": 1.0}\\\\n\')")!',
    'exec("import os;os.write(1,b\'{\\"score\\": 1.0}\\\\n\')")!',
    # shell and SQL
    "$(touch {marker})",
    "`touch {marker}`; echo 1",
    "1; touch {marker}",
    "'; ATTACH DATABASE '{marker}' AS x; --",
    "1 UNION SELECT load_extension('/tmp/x')",
    # resource exhaustion
    "[0]*10**9",
    "((((9**64)**64)**64)**64)**64",
    "9**9**9**9",
    "factorial(10**9)",
    "x**(10**10)",
    "9" * 5000,
    "1e999999",
    "(" * _DEPTH + "1" + ")" * _DEPTH,
    "[" * _DEPTH + "]" * _DEPTH,
    "x" * 200_000,
    # text that is not what a parser expects
    "\ud800",
    "\x00",
    "\udcff\udcfe",
    "\u202e1",
    "",
)


def hostile_answers(marker: str, answers: Iterable[str] = HOSTILE_ANSWERS) -> list[str]:
    """``answers`` (default :data:`HOSTILE_ANSWERS`) with ``{marker}`` replaced by
    ``marker`` (a path), so a plugin's own additions name the same marker file."""
    return [answer.replace("{marker}", marker) for answer in answers]


def deeply_nested_json(depth: int = _DEPTH) -> str:
    """Tool-call arguments a model can produce that break recursive parsers: an object
    whose one value is ``depth`` nested lists."""
    return '{"value": ' + "[" * depth + "]" * depth + "}"
