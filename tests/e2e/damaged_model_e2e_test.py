#!/usr/bin/python3
"""End-to-end: `encoderd serve` on damaged copies of a small fixture model.

Each case copies the fixture directory (a torch zip checkpoint, an encoderd.yaml
model card and a WordPiece vocab.txt), damages one thing and starts the daemon
on it. The daemon must exit by itself within a few seconds with a non-zero
status (a signal such as SIGSEGV or SIGABRT gives a negative returncode and
fails), and its output must name the damaged file and say what is wrong. The
hostile pickle must not run: its marker file must not exist afterwards.

usage: damaged_model_e2e_test.py --binary build/cli/encoderd --model-dir DIR
Exits 0 when every check passed; prints each failed check.
"""
import argparse
import pathlib
import pickle
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zipfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from e2e_common import FAILURES, check  # noqa: E402

START_TIMEOUT_S = 20  # a damaged model must be refused well within this
CHECKPOINT = "model.pt"


def rewrite_zip(path, edit):
    """Rewrites the zip at `path` with edit(name, bytes) -> bytes applied to
    every member (CRCs stay consistent: the damage is in the content)."""
    with zipfile.ZipFile(path) as z:
        members = [(info, z.read(info.filename)) for info in z.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for info, data in members:
            z.writestr(info, edit(info.filename, data))


def edit_pickle(edit):
    return lambda path: rewrite_zip(path, lambda n, d: edit(d) if n.endswith("data.pkl") else d)


def replace_once(old, new):
    def edit(data):
        assert data.count(old) >= 1, f"pattern {old!r} not in the pickle"
        return data.replace(old, new, 1)
    return edit


def flip_bits(data, start, end, count, seed):
    data = bytearray(data)
    rng = random.Random(seed)
    for _ in range(count):
        i = rng.randrange(start, end)
        data[i] ^= 1 << rng.randrange(8)
    return bytes(data)


def raw_member_span(path, suffix):
    """(start, end) of the stored bytes of the zip member ending in `suffix`."""
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if i.filename.endswith(suffix))
    raw = pathlib.Path(path).read_bytes()
    off = info.header_offset
    name_len = int.from_bytes(raw[off + 26:off + 28], "little")
    extra_len = int.from_bytes(raw[off + 28:off + 30], "little")
    start = off + 30 + name_len + extra_len
    return start, start + info.compress_size


def flip_in_member(suffix, count, seed):
    def damage(path):
        start, end = raw_member_span(path, suffix)
        p = pathlib.Path(path)
        p.write_bytes(flip_bits(p.read_bytes(), start, end, count, seed))
    return damage


class Hostile:
    """Unpickles as os.system(command), as a malicious checkpoint would."""

    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        import os
        return (os.system, (self.command,))


def hostile_pickle(marker):
    """The whole data.pkl is a call of os.system."""
    payload = pickle.dumps({"embedding.weight": Hostile(f"touch {marker}")}, protocol=2)
    return edit_pickle(lambda _: payload)


def hostile_global(marker):
    """The real data.pkl with its first tensor rebuilt by os.system instead of
    torch._utils._rebuild_tensor_v2 (the call the loader must refuse)."""
    call = pickle.dumps(Hostile(f"touch {marker}"), protocol=2)
    global_op = call[call.index(b"c"):call.index(b"\n", call.index(b"\n") + 1) + 1]  # c<module>\nsystem\n
    return edit_pickle(replace_once(b"ctorch._utils\n_rebuild_tensor_v2\n", global_op))


def truncate(fraction):
    def damage(path):
        p = pathlib.Path(path)
        data = p.read_bytes()
        p.write_bytes(data[:int(len(data) * fraction)])
    return damage


def write(text_or_bytes):
    def damage(path):
        p = pathlib.Path(path)
        if isinstance(text_or_bytes, bytes):
            p.write_bytes(text_or_bytes)
        else:
            p.write_text(text_or_bytes)
    return damage


def remove(path):
    pathlib.Path(path).unlink()


def tokenizer_json(text):
    """The card names tokenizer.json, which holds `text`."""
    def damage(path):
        pathlib.Path(path).write_text(text)
        card = pathlib.Path(path).parent / "encoderd.yaml"
        old = "  type: wordpiece\n  file: vocab.txt\n  lower_case: true\n"
        assert old in card.read_text(), "the fixture's card no longer names vocab.txt this way"
        card.write_text(card.read_text().replace(old, "  type: tokenizer-json\n  file: tokenizer.json\n"))
    return damage


def sentencepiece_with_a_damaged_map(source):
    """The card names a sentencepiece model: `source`'s, whose normalization
    map (precompiled_charsmap) has every replacement start 2 GiB past it. The
    sentencepiece library loads such a map unchecked and reads there while
    encoding a client's text."""
    def damage(path):
        from sentencepiece import sentencepiece_model_pb2
        proto = sentencepiece_model_pb2.ModelProto()
        proto.ParseFromString(pathlib.Path(source).read_bytes())
        blob = bytearray(proto.normalizer_spec.precompiled_charsmap)
        assert blob, f"{source} has no normalization map"
        trie_bytes = struct.unpack_from("<I", blob)[0]
        for at in range(4, 4 + trie_bytes, 4):
            if struct.unpack_from("<I", blob, at)[0] >> 31:  # a leaf's value unit
                struct.pack_into("<I", blob, at, 1 << 31 | 0x7FFFFFF0)
        proto.normalizer_spec.precompiled_charsmap = bytes(blob)
        pathlib.Path(path).write_bytes(proto.SerializeToString())
        card = pathlib.Path(path).parent / "encoderd.yaml"
        old = "  type: wordpiece\n  file: vocab.txt\n  lower_case: true\n"
        assert old in card.read_text(), "the fixture's card no longer names vocab.txt this way"
        card.write_text(card.read_text().replace(
            old, f"  type: sentencepiece\n  file: {pathlib.Path(path).name}\n"))
    return damage


def run_daemon(binary, model_dir, log_path):
    """Starts `encoderd serve` on `model_dir`; returns (returncode or None when
    it was still running after START_TIMEOUT_S, seconds, output)."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen([binary, "serve", "--address", "127.0.0.1", "--port", "0",
                                 "--metrics-port", "0", "--model-name", "damaged",
                                 "--model-dir", str(model_dir)],
                                stdout=log, stderr=subprocess.STDOUT)
        started = time.time()
        try:
            rc = proc.wait(timeout=START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = None
    return rc, time.time() - started, pathlib.Path(log_path).read_text(errors="replace")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--model-dir", required=True, help="fixture: torch zip checkpoint, card, vocab.txt")
    p.add_argument("--spm-model", help="a sentencepiece model with a normalization map "
                   "(default: the fixtures' tokenizers/spm/sentencepiece.unigram.model)")
    args = p.parse_args()
    spm_model = args.spm_model or (pathlib.Path(args.model_dir).resolve().parents[1] /
                                   "tokenizers" / "spm" / "sentencepiece.unigram.model")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="encoderd_damaged_"))
    marker = tmp / "hostile_pickle_ran"

    # name: (file damaged, damage(path), regex the output must match: what is wrong)
    cases = {
        "truncated checkpoint": (CHECKPOINT, truncate(0.5),
                                 r"(?i)truncat|end of (the )?(file|central directory)|zip"),
        "checkpoint cut to 100 bytes": (CHECKPOINT, truncate(100 / 514138),
                                        r"(?i)truncat|end of|zip|too (short|small)"),
        "bit flips in the stored pickle": ("data.pkl", flip_in_member("data.pkl", 8, 1),
                                           r"data\.pkl' fails its CRC-32 check"),
        "one bit flipped in tensor data": ("data.pkl", flip_in_member("/data/0", 1, 2),
                                           r"data/0' fails its CRC-32 check"),
        "bit flips in pickle (CRC fixed)": ("data.pkl", edit_pickle(lambda d: flip_bits(d, 2, len(d), 6, 7)),
                                            r"(?i)pickle|opcode|global|storage|tensor|shape"),
        "storage numel too large": ("data.pkl", edit_pickle(replace_once(
            b"X\x03\x00\x00\x00cpuq\x07M\x00\xe9", b"X\x03\x00\x00\x00cpuq\x07J\xff\xff\xff\x7f")),
            r"(?i)storage|bytes|size|elements"),
        "storage offset past the end": ("data.pkl", edit_pickle(replace_once(
            b"QK\x00M\xa4\x03K@", b"QJ\x00\x00\x00\x10M\xa4\x03K@")),
            r"(?i)storage|offset|bytes|out of range|past"),
        "tensor size past the storage": ("data.pkl", edit_pickle(replace_once(
            b"QK\x00M\xa4\x03K@", b"QK\x00M\xa4\x7fK@")),
            r"(?i)storage|size|bytes|elements|shape"),
        # The error names both the missing tensor and the global not run.
        "hostile pickle (os.system)": ("data.pkl", hostile_pickle(marker),
                                       r"missing tensor 'embedding\.weight'.*(posix|os)\.system"),
        "hostile global replacing _rebuild_tensor_v2": ("data.pkl", hostile_global(marker),
                                                        r"missing tensor 'embedding\.weight'.*"
                                                        r"(posix|os)\.system"),
        "missing model card": ("encoderd.yaml", remove, r"(?i)encoderd\.yaml|config\.json|no model"),
        "garbled model card": ("encoderd.yaml", write("family: [\x01 unclosed\nnum_heads: {{{\n"),
                               r"(?i)yaml|parse|family|card"),
        "model card with a wrong type": ("encoderd.yaml", lambda path: pathlib.Path(path).write_text(
            pathlib.Path(path).read_text().replace("num_heads: 4", "num_heads: many")),
            r"(?i)num_heads"),
        "garbled tokenizer": ("vocab.txt", write(b"\xff\xfe\x00garbage\x00\n" * 3),
                              r"(?i)vocab|utf-8|token|special"),
        "empty tokenizer": ("vocab.txt", write(b""), r"(?i)vocab|empty|token"),
        "truncated tokenizer.json": ("tokenizer.json", tokenizer_json('{"model": {"type": "WordPi'),
                                     r"not valid JSON"),
        "sentencepiece model with a damaged normalization map": (
            "sentencepiece.bpe.model", sentencepiece_with_a_damaged_map(spm_model),
            r"precompiled_charsmap: unit \d+'s replacement starts at byte 2147483632"),
        "tokenizer.json of a pipeline not read": (
            "tokenizer.json", tokenizer_json('{"model": {"type": "WordLevel", "vocab": {"a": 0}}}'),
            r"model\.type is \"WordLevel\""),
    }
    for number, (name, (target, damage, why)) in enumerate(cases.items()):
        model = tmp / f"case{number:02d}"  # neutral names: the regexes match only messages
        shutil.copytree(args.model_dir, model)
        path = model / (CHECKPOINT if target == "data.pkl" else target)
        damage(path)
        rc, seconds, out = run_daemon(args.binary, model, tmp / f"{model.name}.log")
        errors = [line for line in out.splitlines() if " E " in line] or out.splitlines()[-1:]
        print(f"{name}: rc={rc} in {seconds:.2f} s: " + " | ".join(errors).replace(str(tmp) + "/", ""),
              flush=True)
        # rc None: still running after START_TIMEOUT_S (a guard against a hang,
        # not a speed requirement).
        check(rc is not None and rc > 0, f"{name}: exits non-zero by itself, no signal (rc={rc})")
        shown = target if target != "data.pkl" else CHECKPOINT
        check(shown in out, f"{name}: the output names {shown}")
        check(re.search(why, out) is not None, f"{name}: the output says what is wrong ({why})")
        check("core dumped" not in out.lower() and "AddressSanitizer" not in out,
              f"{name}: no crash report")
    check(not marker.exists(), "the hostile pickle's os.system did not run (no marker file)")
    print(f"{len(FAILURES)} failure(s)")
    if not FAILURES:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
