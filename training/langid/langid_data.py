"""Builds the language-identification corpus from Debian gettext catalogs.

Shared by extract_data.py (writes the splits) and evaluate.py (re-creates the
test split on a fresh machine without retraining). Everything here is
deterministic: the same installed package versions give byte-identical splits.

Pipeline: apt-get install the catalog packages -> msgunfmt each .mo -> parse
the PO text -> clean every line (placeholders, markup, options, accelerators)
-> filter (too short, symbol-dominated, identical to the English source)
-> split BY SOURCE STRING: sha1(msgid) % 10 == 0 is test, == 1 validation,
else train, so every translation of one msgid lands in the same split
-> deduplicate (a text seen in several splits stays only in the earliest of
train, val, test; a text seen under two labels is dropped) -> cap each
language per split by sha1(text) order.
"""
import collections
import hashlib
import json
import os
import re
import subprocess
import sys

# Label -> locale directories under /usr/share/locale merged into it.
# "en" is special: its texts are the catalogs' msgids.
LANGUAGES = {
    "en": [],
    "de": ["de"], "fr": ["fr"], "es": ["es"], "it": ["it"],
    "pt": ["pt", "pt_BR"], "nl": ["nl"], "pl": ["pl"], "ru": ["ru"],
    "uk": ["uk"], "cs": ["cs"], "sv": ["sv"], "tr": ["tr"],
    "ja": ["ja"], "zh": ["zh_CN"], "ko": ["ko"],
}
LABELS = list(LANGUAGES)

# gettext domain -> Debian 12 package that ships /usr/share/locale/*/LC_MESSAGES/<domain>.mo
CATALOGS = {
    "coreutils": "coreutils", "bash": "bash", "dpkg": "dpkg",
    "dpkg-dev": "libdpkg-perl", "tar": "tar", "sed": "sed", "grep": "grep",
    "diffutils": "diffutils", "findutils": "findutils", "apt": "apt",
    "libapt-pkg6.0": "libapt-pkg6.0", "gettext-tools": "gettext",
    "gettext-runtime": "gettext-base", "glib20": "libglib2.0-data",
    "gtk20": "libgtk2.0-common", "gtk20-properties": "libgtk2.0-common",
    "wget": "wget", "make": "make", "xz": "xz-utils", "gnupg2": "gnupg-l10n",
    "libc": "libc-l10n", "procps-ng": "procps", "shadow": "login",
    "git": "git", "gsettings-desktop-schemas": "gsettings-desktop-schemas",
    "shared-mime-info": "shared-mime-info", "appstream": "appstream",
    "libexif-12": "libexif12", "gstreamer-1.0": "libgstreamer1.0-0",
    "man-db": "man-db", "psmisc": "psmisc", "Linux-PAM": "libpam-runtime",
    "gnutls30": "libgnutls30", "gdk-pixbuf": "libgdk-pixbuf2.0-common",
    "adduser": "adduser", "at-spi2-core": "at-spi2-common",
    "avahi": "libavahi-common-data", "binutils": "binutils-common",
    "bfd": "binutils-common", "ld": "binutils-common",
    "opcodes": "binutils-common", "gprof": "binutils-common",
    "gas": "binutils-common", "gold": "binutils-common",
}
PACKAGES = sorted(set(CATALOGS.values()) | {"gettext"})  # gettext: msgunfmt
LOCALE_DIR = "/usr/share/locale"

SPLITS = ("train", "val", "test")
# Per-language caps (texts chosen by sha1(text) order, so deterministic).
CAPS = {"train": 6000, "val": 600, "test": 1000}
MIN_LETTERS = 10
MIN_LETTER_RATIO = 0.5
MAX_CHARS = 400


def ensure_packages(packages=None):
    """Installs the catalog packages (and gettext), or `packages`, if any is
    missing."""
    packages = PACKAGES if packages is None else packages
    missing = [p for p in packages if subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", p], capture_output=True,
        text=True).stdout.find("install ok installed") < 0]
    if not missing:
        return
    if os.geteuid() != 0:
        sys.exit("langid: missing packages %s; run as root or install them: "
                 "apt-get install --no-install-recommends %s"
                 % (missing, " ".join(missing)))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends"]
                   + missing, check=True, env=env)


NPM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "npm")


def ensure_npm():
    """Installs training/langid/npm's packages (npm ci) if any is missing."""
    with open(os.path.join(NPM_DIR, "package.json")) as f:
        wanted = json.load(f)["dependencies"]
    if not all(os.path.isdir(os.path.join(NPM_DIR, "node_modules", name)) for name in wanted):
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=NPM_DIR, check=True)


def package_versions(packages=None):
    packages = PACKAGES if packages is None else packages
    if not packages:
        return {}
    out = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Version}\n"]
                         + packages, capture_output=True, text=True).stdout
    return dict(line.split("\t") for line in out.splitlines() if "\t" in line)


_PO_STR = re.compile(r'"((?:[^"\\]|\\.)*)"')
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "r": "\r", "a": "",
            "b": "", "f": "", "v": ""}


def _unquote(s):
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), s)


def parse_po(text):
    """Yields (msgid, msgstr) for every translated entry of msgunfmt output;
    plural entries give msgstr[0]. The header entry (empty msgid) is skipped."""
    entry, key = {}, None
    for line in text.splitlines() + [""]:
        line = line.strip()
        if not line or line.startswith("#"):
            if entry.get("msgid") and entry.get("msgstr"):
                yield entry["msgid"], entry["msgstr"]
            entry, key = ({}, None) if not line else (entry, key)
            continue
        m = re.match(r'^(msgctxt|msgid_plural|msgid|msgstr(?:\[(\d+)\])?)\s+"', line)
        if m:
            if m.group(1) == "msgid" and entry.get("msgid") is not None:
                if entry.get("msgstr"):
                    yield entry["msgid"], entry["msgstr"]
                entry = {}
            key = m.group(1)
            if key.startswith("msgstr["):
                key = "msgstr" if m.group(2) == "0" else None
            line = line[m.end() - 1:]
        if key is None:
            continue
        for s in _PO_STR.findall(line):
            entry[key] = entry.get(key, "") + _unquote(s)


def read_catalog(path):
    out = subprocess.run(["msgunfmt", path], capture_output=True, check=True)
    return list(parse_po(out.stdout.decode("utf-8", errors="replace")))


_CLEAN_PATTERNS = [re.compile(p) for p in (
    r"https?://\S+|www\.\S+|\S+@\S+\.\w+",                   # URLs, e-mail
    r"<[^<>\n]{0,80}>",                                       # markup tags
    r"&(?:[a-zA-Z]+|#\d+);",                                  # entities
    r"%\(\w+\)[-+ #0]*\d*(?:\.\d+)?[a-zA-Z]",                 # %(name)s
    r"%<\w+>",                                                # %<PRIu64>
    r"%(?:\d+\$)?[-+ #0']*(?:\*|\d+)?(?:\.(?:\*|\d+))?"
    r"(?:hh|h|ll|l|L|q|j|z|t|I64|I32)?[diouxXeEfFgGaAcspnmS%]",  # printf
    r"\{[\w.:!-]*\}",                                         # {0} {name}
    r"\$\{?\w+\}?",                                           # $VAR ${VAR}
    r"(?<![\w-])--?[A-Za-z0-9][\w-]*(?:[=\[][^\s\]]*\]?)?",  # -x --opt=ARG
    r"\((?:_|&)[A-Za-z0-9]\)",                                # (_F) accelerator
    r"[\w./-]*/[\w./-]+",                                     # paths
)]
_ACCEL = re.compile(r"(?:(?<=\s)|^)[_&](?=\w)")
_SPACES = re.compile(r"\s+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def clean_lines(text):
    """Splits a catalog string into cleaned lines that look like language:
    placeholders, markup, options and paths removed; lines dominated by
    them, shorter than MIN_LETTERS letters, or (outside CJK scripts) with
    fewer than two words are dropped."""
    out = []
    for raw in text.replace("\r", "\n").split("\n"):
        line = raw
        for pat in _CLEAN_PATTERNS:
            line = pat.sub(" ", line)
        line = _ACCEL.sub("", line)
        line = _SPACES.sub(" ", line).strip(" \t:;,.-*|=#>")
        line = line.strip()
        letters = sum(c.isalpha() for c in line)
        nonspace = sum(not c.isspace() for c in raw)
        if letters < MIN_LETTERS or letters < MIN_LETTER_RATIO * nonspace:
            continue
        if not _CJK.search(line) and len(re.findall(r"[^\W\d_]{2,}", line)) < 2:
            continue
        out.append(line[:MAX_CHARS])
    return out


def split_of(msgid):
    """The split of every text derived from this source string."""
    h = int.from_bytes(hashlib.sha1(msgid.encode("utf-8")).digest()[:8], "big")
    return "test" if h % 10 == 0 else "val" if h % 10 == 1 else "train"


def _text_key(text):
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def build_corpus(log=print):
    """Returns ({split: [(label, text), ...]}, stats) from installed catalogs."""
    candidates = collections.defaultdict(set)  # (label, text) -> {split}
    english = {}  # msgid -> cleaned lines
    missing, read_paths = [], []
    for domain in sorted(CATALOGS):
        for label, locales in LANGUAGES.items():
            for loc in locales:
                path = os.path.join(LOCALE_DIR, loc, "LC_MESSAGES", domain + ".mo")
                if not os.path.exists(path):
                    missing.append(path)
                    continue
                read_paths.append(path)
                for msgid, msgstr in read_catalog(path):
                    if msgid not in english:
                        english[msgid] = clean_lines(msgid)
                    src = set(english[msgid])
                    split = split_of(msgid)
                    for line in clean_lines(msgstr):
                        if line not in src:
                            candidates[(label, line)].add(split)
    found = {os.path.basename(p)[:-3] for p in read_paths}
    absent = sorted(d for d in CATALOGS if d not in found)
    if absent:
        sys.exit("langid: no catalog of %s under %s (packages %s); is "
                 "/usr/share/locale excluded in /etc/dpkg/dpkg.cfg.d/?" % (
                     absent, LOCALE_DIR, sorted({CATALOGS[d] for d in absent})))
    for msgid, lines in english.items():
        for line in lines:
            candidates[("en", line)].add(split_of(msgid))
    data, stats = finalize_splits(candidates, CAPS)
    stats["catalogs_absent"] = len(missing)
    return data, stats


def finalize_splits(candidates, caps):
    """Turns {(label, text): {split, ...}} into ({split: [(label, text)]},
    stats): a text under two labels is dropped, a text in several splits
    stays in the earliest of train/val/test, each language is capped per
    split by sha1(text) order, rows are ordered by sha1(label, text)."""
    labels_of = collections.defaultdict(set)
    for label, text in candidates:
        labels_of[text].add(label)
    per = {s: collections.defaultdict(list) for s in SPLITS}
    ambiguous = 0
    for (label, text), splits in candidates.items():
        if len(labels_of[text]) > 1:
            ambiguous += 1
            continue
        split = next(s for s in SPLITS if s in splits)
        per[split][label].append(text)
    data, stats = {}, {"available": {}, "kept": {}, "ambiguous_dropped": ambiguous}
    for split in SPLITS:
        rows = []
        for label in LABELS:
            texts = sorted(per[split][label], key=_text_key)
            stats["available"].setdefault(split, {})[label] = len(texts)
            texts = texts[:caps[split]]
            stats["kept"].setdefault(split, {})[label] = len(texts)
            rows.extend((label, t) for t in texts)
        rows.sort(key=lambda r: _text_key(r[0] + "\t" + r[1]))
        data[split] = rows
    return data, stats


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for label, text in rows:
            f.write(json.dumps({"text": text, "label": label},
                               ensure_ascii=False) + "\n")


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [(r["label"], r["text"]) for r in map(json.loads, f)]


def read_smoke(path):
    """(label, text) rows of a smoke-sentence TSV; '#' lines are comments."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line and not line.startswith("#"):
                label, text = line.split("\t", 1)
                rows.append((label, text))
    return rows


def normalized(text):
    """A text compared without case, punctuation or spacing (for keeping the
    evaluation sentences out of training)."""
    return "".join(c for c in text.casefold() if c.isalnum())


def held_out_texts(paths):
    """The normalized() texts of the sentence TSVs at `paths` (the smoke and
    everyday sentences), which no training text may equal."""
    return {normalized(t) for path in paths for _, t in read_smoke(path)}
