"""The words a memory is found by, the same on SQLite (FTS5) and PostgreSQL (tsvector).

Both databases split text at spaces and punctuation, which leaves a run of Chinese or
Japanese characters as one long "word" that no question repeats exactly. Text is cut here
instead: words of letters and digits, lower-cased, and each run of CJK characters as its
overlapping pairs (上海团队 → 上海 海团 团队), the usual way to search CJK without a
dictionary. The database then only indexes and ranks these terms.
"""

from __future__ import annotations

import re
import unicodedata

# CJK ideographs, kana and hangul: searched by pairs of characters.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+")
_IS_CJK = re.compile(rf"[{_CJK}]")
# Words too common to say what a question is about (English; CJK pairs rarely are).
_STOPWORD_TEXT = """a am an and are as at be but by can could did do does for from had has have
he her his how i if in is it its me my no not of on or our she so that the their them then
there these they this to us was we were what when where which who why will with would you
your yours please tell about know"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
MAX_QUERY_TERMS = 24


def terms(text: str) -> list[str]:
    """The terms of ``text``, in order, repeats kept (they weigh in the ranking)."""
    found: list[str] = []
    for token in _TOKEN.findall(unicodedata.normalize("NFKC", text).lower()):
        if _IS_CJK.match(token):
            found += (
                [token] if len(token) == 1 else [token[i : i + 2] for i in range(len(token) - 1)]
            )
        else:
            found.append(token)
    return found


def query_terms(text: str) -> list[str]:
    """The distinct terms of a question worth searching for, at most ``MAX_QUERY_TERMS``."""
    seen: dict[str, None] = {}
    for term in terms(text):
        if term not in STOPWORDS and (len(term) > 1 or _IS_CJK.match(term)):
            seen.setdefault(term, None)
    return list(seen)[:MAX_QUERY_TERMS]
