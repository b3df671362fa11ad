"""Builds the prose half of the langid corpus from Debian's translated man pages.

The gettext catalogs (langid_data.py) are short UI strings; these are full
sentences from manual pages: the manpages-l10n packages (manpages-de, -fr,
...), manpages-ja, manpages-zh, manpages-tr, and for English manpages and
manpages-dev. Only pages owned by the packages in MAN_PACKAGES (`dpkg -L`)
are read, so the corpus depends only on those packages' versions.

Pipeline: roff source -> paragraphs (macros, fonts and escapes stripped;
NAME/SYNOPSIS-like lines, .nf/.EX code blocks, option tags of .TP/.IP
dropped) -> sentences -> langid_data.clean_lines -> keep real sentences
(MIN_CHARS..MAX_CHARS, sentence-final punctuation outside CJK, at least
MIN_WORDS words, script of the language, not an untranslated English
paragraph) -> split BY PAGE: sha1(page name, e.g. "ls.1") % 10 == 0 test,
== 1 validation, else train, so all translations of one page share a split
-> deduplicate like the catalogs -> cap per language by sha1(text) order.
"""
import collections
import gzip
import hashlib
import os
import re
import subprocess

import langid_data

# Label -> locale directories under /usr/share/man ("" is English: man1..man9).
MAN_LOCALES = {
    "en": [""], "de": ["de"], "fr": ["fr"], "es": ["es"], "it": ["it"],
    "pt": ["pt", "pt_BR"], "nl": ["nl"], "pl": ["pl"], "ru": ["ru"],
    "uk": ["uk"], "cs": ["cs"], "sv": ["sv"], "tr": ["tr"], "ja": ["ja"],
    "zh": ["zh_CN"], "ko": ["ko"],
}
# Packages whose pages are read. Debian 12 has no manpages-ko; Korean pages
# come from man-db, psmisc, xz-utils and login (already catalog packages).
MAN_PACKAGES = [
    "manpages", "manpages-dev", "manpages-de", "manpages-fr", "manpages-es",
    "manpages-it", "manpages-pl", "manpages-ru", "manpages-uk", "manpages-cs",
    "manpages-nl", "manpages-pt", "manpages-pt-br", "manpages-sv",
    "manpages-ja", "manpages-zh", "manpages-tr", "man-db", "psmisc",
    "xz-utils", "login",
]
MAN_ROOT = "/usr/share/man"
CAPS = {"train": 4000, "val": 300, "test": 500}
MIN_CHARS, MAX_CHARS, MIN_WORDS = 20, 300, 4

_LABEL_OF_DIR = {d: lab for lab, dirs in MAN_LOCALES.items() for d in dirs}
_PAGE_PATH = re.compile(r"^/usr/share/man/(?:([A-Za-z_]+)/)?man[1-9][^/]*/([^/]+)\.gz$")


def man_pages():
    """Returns sorted [(label, page name, path)] of the MAN_PACKAGES' pages."""
    out = subprocess.run(["dpkg", "-L"] + MAN_PACKAGES, capture_output=True,
                         text=True).stdout
    pages = set()
    for path in out.splitlines():
        m = _PAGE_PATH.match(path)
        if not m or (m.group(1) or "") not in _LABEL_OF_DIR:
            continue
        if os.path.isfile(path) and not os.path.islink(path):
            pages.add((_LABEL_OF_DIR[m.group(1) or ""], m.group(2), path))
    return sorted(pages)


_ESCAPE_SUBS = [(re.compile(p), r) for p, r in (
    (r"\\f(?:\[[^\]]*\]|\(..|.)", ""),          # font changes
    (r"\\s[+-]?\d+|\\s\(\d\d|\\s\[[^\]]*\]", ""),  # size changes
    (r"\\\*(?:\[[^\]]*\]|\(..|.)", ""),         # strings
    (r"\\n(?:\[[^\]]*\]|\(..|.)", ""),          # registers
    (r"\\\((?:lq|rq|Lq|Rq)", '"'), (r"\\\((?:aq|cq|oq)", "'"),
    (r"\\\((?:em|en|hy)", "-"), (r"\\\(bu", ""),
    (r"\\\[(?:lq|rq)\]", '"'), (r"\\\[[^\]]*\]", ""), (r"\\\(..", ""),
    (r"\\[-]", "-"), (r"\\e", "\\\\"), (r"\\[ ~0]", " "),
    (r"\\[&c%:|^/,)]", ""), (r"\\[hvwlLDxXoZbk]'[^']*'", ""),
)]
_CJK_END = re.compile(r"[\u3000-\u30ff\u3400-\u9fff\uac00-\ud7af\uff00-\uffef]$")
_CJK_START = re.compile(r"^[\u3000-\u30ff\u3400-\u9fff\uac00-\ud7af\uff00-\uffef]")
# Macros whose arguments are running text.
_FONT_MACROS = {"B", "I", "R", "SM", "SB", "BR", "RB", "BI", "IB", "IR", "RI",
                "UR", "MT"}
_BREAK_MACROS = {"PP", "P", "LP", "TP", "TQ", "IP", "HP", "SH", "SS", "sp",
                 "br", "RS", "RE", "in", "ti", "bp", "TH", "Sh", "Ss", "Pp",
                 "It", "Bl", "El"}


def _unescape(line):
    for pat, rep in _ESCAPE_SUBS:
        line = pat.sub(rep, line)
    return line.replace("\\", "")


def _join(parts):
    out = ""
    for p in parts:
        if out and not (_CJK_END.search(out) and _CJK_START.search(p)):
            out += " "
        out += p
    return out


def roff_paragraphs(source):
    """Running-text paragraphs of a man page: headings, the first section
    (NAME), .TP/.IP tags, .nf/.EX blocks, tables and .de/.ig bodies are
    dropped; font macros keep their (unquoted) arguments."""
    paras, cur = [], []
    sections = 0
    skip_block = skip_next = False
    for raw in source.splitlines():
        if raw.startswith(('.\\"', "'\\\"", '\\"')):
            continue
        if raw.strip() == "..":  # ends .de / .ig
            skip_block = False
            continue
        if raw.startswith((".", "'")):
            parts = raw[1:].strip().split(None, 1)
            name = parts[0] if parts else ""
            arg = parts[1] if len(parts) > 1 else ""
            if name in ("nf", "EX", "TS", "EQ", "de", "ig"):
                skip_block = True
            elif name in ("fi", "EE", "TE", "EN"):
                skip_block = False
            if name in _BREAK_MACROS or name in ("nf", "EX", "TS"):
                if cur:
                    paras.append(_join(cur))
                cur = []
                if name in ("SH", "Sh"):
                    sections += 1
                skip_next = name in ("TP", "TQ")
            elif name in _FONT_MACROS and not skip_block and sections > 1:
                if not skip_next:
                    args = [a or b for a, b in re.findall(r'"([^"]*)"|(\S+)', arg)]
                    sep = " " if name in ("B", "I", "R", "SM", "SB") else ""
                    cur.append(_unescape(sep.join(args)))
                skip_next = False
            continue
        if skip_block or sections <= 1:
            continue
        if skip_next:  # the tag line of .TP
            skip_next = False
            continue
        text = _unescape(raw).strip()
        if text:
            cur.append(text)
    if cur:
        paras.append(_join(cur))
    return paras


_SENT_END = re.compile(r"(?<=[.!?])\s+(?=[\"'«»„“(\[]?[^\W\d_])|(?<=[。！？])")
_FINAL = re.compile(r"[.!?。！？)\"»“”]$")
_SCRIPT = {
    "ru": re.compile(r"[\u0400-\u04ff]"), "uk": re.compile(r"[\u0400-\u04ff]"),
    "ja": re.compile(r"[\u3040-\u30ff\u3400-\u9fff]"),
    "zh": re.compile(r"[\u3400-\u9fff]"), "ko": re.compile(r"[\uac00-\ud7af]"),
}
_KANA = re.compile(r"[\u3040-\u30ff]")
_LATIN = re.compile(r"[A-Za-z\u00c0-\u024f]")
# Frequent English words that are not words of the other Latin-script labels.
_ENGLISH = set("the and is are with that this which from when should you your "
               "been has have was were will would can these those there their "
               "they into only such may must not does".split())


def _looks_english(text):
    words = re.findall(r"[A-Za-z']+", text.lower())
    hits = sum(w in _ENGLISH for w in words)
    return hits >= 2 and hits >= 0.12 * len(words)


def sentences(paragraph, label, min_chars=MIN_CHARS, min_words=MIN_WORDS):
    """Real sentences of one paragraph in the script of `label`: min_chars to
    MAX_CHARS characters, at least min_words words outside CJK."""
    out = []
    cjk = label in ("ja", "zh", "ko")
    for sent in _SENT_END.split(paragraph):
        sent = sent.strip()
        if not (min_chars <= len(sent) <= MAX_CHARS) or "\ufffd" in sent:
            continue
        if not cjk and not _FINAL.search(sent):
            continue
        cleaned = langid_data.clean_lines(sent)
        if len(cleaned) != 1 or len(cleaned[0]) < min_chars:
            continue
        text = cleaned[0]
        # clean_lines strips final punctuation; put a period back on prose.
        if not cjk and not _FINAL.search(text):
            text += sent[-1] if sent[-1] in ".!?" else "."
        letters = [c for c in text if c.isalpha()]
        if not cjk and len(text.split()) < min_words:
            continue
        if label in _SCRIPT:
            native = sum(bool(_SCRIPT[label].match(c)) for c in letters)
            if native < 0.6 * len(letters):
                continue
            if label == "ja" and not _KANA.search(text):
                continue  # kanji-only lines may be Chinese
            if label == "zh" and _KANA.search(text):
                continue
        else:
            if sum(bool(_LATIN.match(c)) for c in letters) < 0.9 * len(letters):
                continue
            if label != "en" and _looks_english(text):
                continue  # paragraph left untranslated
        out.append(text)
    return out


def read_page(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None  # legacy-encoded page; skipped rather than guessed


def split_of(page):
    h = int.from_bytes(hashlib.sha1(page.encode("utf-8")).digest()[:8], "big")
    return "test" if h % 10 == 0 else "val" if h % 10 == 1 else "train"


def build_corpus(log=print):
    """Returns ({split: [(label, text), ...]}, stats) from installed pages."""
    candidates = collections.defaultdict(set)
    pages_read = collections.Counter()
    undecodable = 0
    for label, page, path in man_pages():
        src = read_page(path)
        if src is None:
            undecodable += 1
            continue
        if src.lstrip().startswith(".so "):
            continue
        pages_read[label] += 1
        split = split_of(page)
        for para in roff_paragraphs(src):
            for sent in sentences(para, label):
                candidates[(label, sent)].add(split)
    data, stats = langid_data.finalize_splits(candidates, CAPS)
    stats.update(pages=dict(pages_read), undecodable_pages=undecodable)
    return data, stats
