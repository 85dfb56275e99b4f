"""Answer comparison: SQuAD-style normalisation, exact match, token F1, numeric match."""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterable
from fractions import Fraction

__all__ = [
    "exact_match",
    "f1",
    "normalize_answer",
    "numeric_match",
    "parse_number",
    "substring_match",
]

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.IGNORECASE)
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower-case, drop punctuation and articles, squeeze spaces."""
    text = text.lower().translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _golds(gold: str | Iterable[str]) -> list[str]:
    return [gold] if isinstance(gold, str) else list(gold)


def exact_match(prediction: str, gold: str | Iterable[str]) -> float:
    """1.0 iff the normalised prediction equals any normalised gold alias."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in _golds(gold)))


def substring_match(prediction: str, gold: str | Iterable[str]) -> float:
    """1.0 iff any normalised gold alias occurs in the normalised prediction (Search-R1 subem)."""
    pred = normalize_answer(prediction)
    return float(any(normalize_answer(g) and normalize_answer(g) in pred for g in _golds(gold)))


def _f1_single(prediction: str, gold: str) -> float:
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    common = Counter(pred_tokens) & Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred_tokens)
    recall = overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1(prediction: str, gold: str | Iterable[str]) -> float:
    """Token-level F1 against the best-matching gold alias (SQuAD)."""
    return max((_f1_single(prediction, g) for g in _golds(gold)), default=0.0)


_NUMBER = re.compile(
    r"""^\s*(?P<sign>[-+−])?\s*[$€£]?\s*
    (?:(?P<whole>\d+)\s+(?P<fnum>\d+)\s*/\s*(?P<fden>\d+)      # mixed fraction 1 1/2
      |(?P<num>\d+)\s*/\s*(?P<den>\d+)                         # fraction 3/4
      |(?P<dec>(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?)  # 1,000.50 / 1e3
    )\s*(?P<pct>%)?\s*$""",
    re.VERBOSE,
)


def parse_number(text: str | float | int) -> float | None:
    """Parse "1,000", "3.50", "-2", "3/4", "1 1/2", "$5", "50%" (-> 50.0); None if not a number."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int | float):
        return float(text)
    cleaned = text.strip().rstrip(".").replace("\u2212", "-")
    match = _NUMBER.match(cleaned)
    if not match:
        return None
    sign = -1.0 if match["sign"] in ("-", "\u2212") else 1.0
    value: Fraction | float
    if match["whole"] is not None:
        if int(match["fden"]) == 0:
            return None
        value = int(match["whole"]) + Fraction(int(match["fnum"]), int(match["fden"]))
    elif match["num"] is not None:
        if int(match["den"]) == 0:
            return None
        value = Fraction(int(match["num"]), int(match["den"]))
    else:
        dec = match["dec"]
        if not dec or not any(ch.isdigit() for ch in dec):
            return None
        value = float(dec.replace(",", ""))
    return sign * float(value)


def numeric_match(
    prediction: str | float | int,
    gold: str | float | int,
    *,
    rel_tol: float = 1e-6,
    abs_tol: float = 1e-9,
) -> float:
    """1.0 iff both parse as numbers equal within tolerance (relative and absolute)."""
    pred, ref = parse_number(prediction), parse_number(gold)
    if pred is None or ref is None or math.isnan(pred) or math.isnan(ref):
        return 0.0
    return float(math.isclose(pred, ref, rel_tol=rel_tol, abs_tol=abs_tol))
