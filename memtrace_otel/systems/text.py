"""Text helpers shared by the offline LLM stand-ins: tokens, sentences, dates, token F1.

Everything here is deterministic and dependency-free, so that the reference
systems give the same answers on every machine.
"""

from __future__ import annotations

import functools
import re
import string
from collections import Counter

__all__ = [
    "STOPWORDS",
    "content_tokens",
    "normalize_answer",
    "sentences",
    "short_date",
    "stem",
    "token_f1",
    "words",
]

STOPWORDS = frozenset([
    'a', 'an', 'the', 'and', 'or', 'but', 'if', 'of', 'at', 'by', 'for', 'with', 'about', 'against',
    'between', 'into', 'through', 'during', 'before', 'after', 'above', 'below', 'to', 'from', 'up',
    'down', 'in', 'out', 'on', 'off', 'over', 'under', 'again', 'further', 'then', 'once', 'here',
    'there', 'when', 'where', 'why', 'how', 'all', 'any', 'both', 'each', 'few', 'more', 'most',
    'other', 'some', 'such', 'no', 'nor', 'not', 'only', 'own', 'same', 'so', 'than', 'too', 'very',
    's', 't', 'can', 'will', 'just', 'don', 'should', 'now', 'i', 'me', 'my', 'myself', 'we', 'our',
    'ours', 'ourselves', 'you', 'your', 'yours', 'yourself', 'he', 'him', 'his', 'himself', 'she',
    'her', 'hers', 'herself', 'it', 'its', 'itself', 'they', 'them', 'their', 'theirs',
    'themselves', 'what', 'which', 'who', 'whom', 'this', 'that', 'these', 'those', 'am', 'is',
    'are', 'was', 'were', 'be', 'been', 'being', 'have', 'has', 'had', 'having', 'do', 'does',
    'did', 'doing', 'would', 'could', 'ought', "i'm", "you're", "he's", "she's", "it's", "we're",
    "they're", "i've", "you've", "we've", "they've", "i'd", "you'd", "he'd", "she'd", "we'd",
    "they'd", "i'll", "you'll", "he'll", "she'll", "we'll", "they'll", "isn't", "aren't", "wasn't",
    "weren't", "hasn't", "haven't", "hadn't", "doesn't", "don't", "didn't", "won't", "wouldn't",
    "shan't", "shouldn't", "can't", 'cannot', "couldn't", "mustn't", "let's", "that's", "who's",
    "what's", "here's", "there's", "when's", "where's", "why's", "how's", 'yeah', 'yes', 'oh',
    'wow', 'hey', 'hi', 'really', 'also', 'got', 'get', 'like', 'know', 'think', 'thanks', 'thank',
    'much', 'lot', 'great', 'good', 'so', 'been', 'going', 'go', 'gonna', 'did', 'one', 'things',
    'thing',
])

_WORD = re.compile(r"[A-Za-z0-9']+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_DATE = re.compile(r"(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})")
_PUNCT = str.maketrans("", "", string.punctuation)


def words(text: str) -> list[str]:
    """Lower-case word tokens.

    >>> words("Hey Mel! I'm fine.")
    ['hey', 'mel', "i'm", 'fine']
    """
    return [w.lower() for w in _WORD.findall(text)]


@functools.lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A crude suffix stripper: enough to match "painting" with "paint".

    >>> [stem(w) for w in ["painting", "paints", "painted", "classes", "is"]]
    ['paint', 'paint', 'paint', 'class', 'is']
    """
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            if suffix == "es" and not word.endswith(("ses", "xes", "ches", "shes")):
                return word[:-1]
            return word[: -len(suffix)]
    return word


def content_tokens(text: str) -> list[str]:
    """Stemmed words that are not stop words.

    >>> content_tokens("What did Caroline research?")
    ['caroline', 'research']
    """
    return list(_content_tokens(text))


@functools.lru_cache(maxsize=65536)
def _content_tokens(text: str) -> tuple[str, ...]:
    return tuple(stem(w.strip("'")) for w in words(text) if w not in STOPWORDS and len(w.strip("'")) > 1)


def sentences(text: str) -> list[str]:
    """Split a chat message into sentences.

    >>> sentences("Hi! I went to a group yesterday. It was great")
    ['Hi!', 'I went to a group yesterday.', 'It was great']
    """
    return [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]


def short_date(date_text: str) -> str:
    """``1:56 pm on 8 May, 2023`` -> ``8 May 2023`` (unchanged when it does not parse).

    >>> short_date("1:56 pm on 8 May, 2023")
    '8 May 2023'
    """
    match = _DATE.search(date_text)
    if match is None:
        return date_text.strip()
    return f"{int(match.group(1))} {match.group(2)} {match.group(3)}"


def normalize_answer(text: str) -> str:
    """SQuAD-style normalisation: lower case, no punctuation, no articles, single spaces.

    >>> normalize_answer("The  Sunday, before 25 May!")
    'sunday before 25 may'
    """
    text = text.lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def token_f1(prediction: str, gold: str) -> float:
    """Token F1 of the normalised prediction against the normalised gold (LoCoMo's metric).

    >>> round(token_f1("8 May 2023", "7 May 2023"), 3)
    0.667
    >>> token_f1("", "x")
    0.0
    """
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = Counter(pred) & Counter(ref)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)
