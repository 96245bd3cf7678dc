"""Search terms of a text: what the full-text index stores and a query is matched by.

Latin, Cyrillic, Greek and other scripts that put spaces between words are split into
lower-cased words (accents kept, no stemming: on-screen text is names, codes and short
phrases more than prose). Chinese, Japanese and Korean are written without spaces; their runs
become overlapping character bigrams ("欢迎光临" -> 欢迎 迎光 光临), the analysis most CJK
search engines use without a dictionary, so a two-character query word matches wherever it
occurs. A run of one character is kept as it is.

English function words ("the", "is", "to", ...) are left out: in a short query they match
most sentences, and fused with the vector search they would lift any sentence that shares
them above the one that means what was asked.

Lance's inverted index then splits the terms on whitespace: the column it indexes holds
``index_terms(text)``, and a query is ``index_terms(query)``.
"""

from __future__ import annotations

import re
import unicodedata

# Han (with extensions A and compatibility), kana, Hangul syllables and jamo.
_CJK = (
    "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\uac00-\ud7af\u1100-\u11ff\u3130-\u318f"
)
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W{_CJK}_]+")
_CJK_RUN = re.compile(rf"[{_CJK}]+")
# English function words; negations and numbers stay ("NO ENTRY", "OPEN 24 HOURS").
STOP_WORDS = frozenset((
    "a", "about", "an", "and", "are", "as", "at", "be", "been", "being", "but", "by", "can",
    "could", "did", "do", "does", "doing", "for", "from", "had", "has", "have", "having", "he",
    "her", "here", "hers", "him", "his", "how", "i", "if", "in", "into", "is", "it", "its",
    "itself", "me", "my", "of", "on", "or", "our", "ours", "she", "so", "than", "that", "the",
    "their", "theirs", "them", "then", "there", "these", "they", "this", "those", "to", "too",
    "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why",
    "will", "with", "would", "you", "your", "yours",
))  # fmt: skip


def terms(text: str) -> list[str]:
    """The search terms of ``text``, in order, with repeats."""
    out: list[str] = []
    for token in _TOKEN.findall(unicodedata.normalize("NFKC", text)):
        if not _CJK_RUN.fullmatch(token):
            word = token.casefold()
            if word not in STOP_WORDS:
                out.append(word)
        elif len(token) == 1:
            out.append(token)
        else:
            out.extend(token[i : i + 2] for i in range(len(token) - 1))
    return out


def index_terms(text: str) -> str:
    """``terms(text)`` as one space-separated string, for a whitespace-tokenised index."""
    return " ".join(terms(text))
