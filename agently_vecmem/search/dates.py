"""Calendar periods named in a query ("in May 2023", "on 7 July, 2023", "2023年5月", "2024年"), so that
records whose ``occurred_at`` falls in them can be preferred (``RetrievalParams.date_boost``).

Only explicit dates with a year are read: a bare month ("in May", "5月") or a relative date ("last
week") names no period without knowing "now" and the user's calendar, and is left to the lexical and dense
signals. Periods are whole UTC days, months or years (the importer stores a session date as that day's
time in UTC), widened by half a day on each side for turns dated in another time zone.

Example:
    >>> [(round(a), round(b)) for a, b in query_periods("What did I do in May 2023?")]
    [(1682856000, 1685577600)]
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

__all__ = ["query_periods"]

_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")
_MONTH_RE = r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|" \
            r"oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?"
_YEAR = r"((?:19|20)\d\d)"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
#: ``7 July, 2023`` / ``7th of July 2023``
_DAY_MONTH_YEAR = re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH_RE},?\s+{_YEAR}\b", re.IGNORECASE)
#: ``July 7, 2023`` / ``July 7th 2023``
_MONTH_DAY_YEAR = re.compile(rf"\b{_MONTH_RE}\s+{_DAY},?\s+{_YEAR}\b", re.IGNORECASE)
#: ``May 2023`` / ``May, 2023`` / ``May of 2023``
_MONTH_YEAR = re.compile(rf"\b{_MONTH_RE},?\s+(?:of\s+)?{_YEAR}\b", re.IGNORECASE)
#: ``2023-05-12`` / ``2023-05`` / ``2023/5/12`` (digit boundaries: CJK letters count as word characters)
_ISO = re.compile(rf"(?<!\d){_YEAR}[-/](\d{{1,2}})(?:[-/](\d{{1,2}}))?(?![\d/-])")
#: ``2023年5月12日`` / ``2023年5月`` / ``2023年`` (Chinese and Japanese; Korean ``2023년 5월``)
_CJK = re.compile(rf"{_YEAR}\s*[年년]\s*(?:(\d{{1,2}})\s*[月월]\s*(?:(\d{{1,2}})\s*[日号號일])?)?")
#: a bare year after a preposition: ``in 2023`` (not any four digits: "2023 dollars")
_YEAR_ONLY = re.compile(rf"\b(?:in|during|throughout|since|of|year)\s+{_YEAR}(?!\d)", re.IGNORECASE)
#: turns dated in another time zone still fall in the named day
_SLACK = 12 * 3600.0


def _month(name: str) -> int:
    return next(i for i, full in enumerate(_MONTHS, start=1) if full.startswith(name.lower().rstrip(".")[:3]))


def _period(year: int, month: int | None = None, day: int | None = None) -> tuple[float, float] | None:
    try:
        if month is None:
            start, end = datetime(year, 1, 1), datetime(year + 1, 1, 1)
        elif day is None:
            start = datetime(year, month, 1)
            end = datetime(year + (month == 12), month % 12 + 1, 1)
        else:
            start = datetime(year, month, day)
            end = datetime.fromordinal(start.toordinal() + 1)
    except ValueError:  # 2023-02-30, month 13: not a date
        return None
    utc = timezone.utc
    return start.replace(tzinfo=utc).timestamp() - _SLACK, end.replace(tzinfo=utc).timestamp() + _SLACK


def query_periods(text: str) -> list[tuple[float, float]]:
    """The periods (``[start, end)`` epoch seconds, UTC, widened by half a day) that ``text`` names.

    The most specific reading of each date wins: ``7 July, 2023`` is that day, not July nor 2023; a bare
    year counts only where no fuller date used it.

    Args:
        text: a query in English, Chinese, Japanese or Korean (or mixed).

    Returns:
        Distinct periods in order of appearance; empty when the text names no dated period.
    """
    found: list[tuple[int, tuple[float, float] | None]] = []
    taken: list[tuple[int, int]] = []

    def claim(m: re.Match[str], period: tuple[float, float] | None) -> None:
        if not any(m.start() < b and a < m.end() for a, b in taken):
            taken.append(m.span())
            found.append((m.start(), period))

    for m in _DAY_MONTH_YEAR.finditer(text):
        claim(m, _period(int(m.group(3)), _month(m.group(2)), int(m.group(1))))
    for m in _MONTH_DAY_YEAR.finditer(text):
        claim(m, _period(int(m.group(3)), _month(m.group(1)), int(m.group(2))))
    for m in _MONTH_YEAR.finditer(text):
        claim(m, _period(int(m.group(2)), _month(m.group(1))))
    for m in _ISO.finditer(text):
        claim(m, _period(int(m.group(1)), int(m.group(2)), int(m.group(3)) if m.group(3) else None))
    for m in _CJK.finditer(text):
        month, day = m.group(2), m.group(3)
        claim(m, _period(int(m.group(1)), int(month) if month else None, int(day) if day and month else None))
    for m in _YEAR_ONLY.finditer(text):
        claim(m, _period(int(m.group(1))))
    out: list[tuple[float, float]] = []
    for _, period in sorted(found, key=lambda f: f[0]):
        if period is not None and period not in out:
            out.append(period)
    return out
