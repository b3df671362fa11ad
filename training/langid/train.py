#!/usr/bin/env python3
"""Trains the langid classifier on the training splits of --sources from
extract_data.py (DATA/train.jsonl: catalogs, prose_train.jsonl: man pages,
dialogue_train.jsonl: Wesnoth story and dialogue, games_train.jsonl: three
more games' dialogue, words_train.jsonl and words2_train.jsonl: texts of
frequent words, two versions, fortunes_train.jsonl: fortune cookies) with
the tokenizer in MODEL_DIR; --catalog-cap / --prose-cap / --dialogue-cap /
--games-cap / --words-cap / --words2-cap / --fortunes-cap keep only the first N texts per language of each
(the files are in sha1 order, so this is a deterministic subset). Texts equal
to a smoke or everyday sentence (ignoring case, spaces and punctuation) are
dropped. Prints validation accuracy per language for each source and the
smoke accuracy after each epoch, then every split's accuracy, and writes
MODEL_DIR/model.pt (state dict, legacy pre-1.6 format) and
MODEL_DIR/encoderd.yaml.

CPU only, --threads threads (default 1), deterministic given --seed and the
thread count (same data, same torch build).
Usage: nice -n 19 /usr/bin/python3 training/langid/train.py \
           [--data build/langid-data] [--model-dir models/langid] [--seed 1]
"""
import argparse
import collections
import math
import random
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import langid_data  # noqa: E402
import langid_model as lm  # noqa: E402
import langid_sources  # noqa: E402


def make_batches(encoded, labels, batch_size, gen):
    """One epoch of batches: a seeded shuffle, then length-sorted within
    windows of 50 batches so batches carry little padding."""
    perm = torch.randperm(len(encoded), generator=gen).tolist()
    window = batch_size * 50
    batches = []
    for start in range(0, len(perm), window):
        chunk = sorted(perm[start:start + window], key=lambda i: len(encoded[i]))
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    order = torch.randperm(len(batches), generator=gen).tolist()
    return [batches[i] for i in order]


def fragments(rows, fraction, seed):
    """Short contiguous pieces of sentences (prose, dialogue), so that the
    model also sees few-word inputs with the function words of running text."""
    rng = random.Random(seed)
    out = []
    for label, text in rows:
        if rng.random() >= fraction:
            continue
        if label in ("ja", "zh"):
            n = rng.randint(4, 14)
            start = rng.randint(0, max(0, len(text) - n))
            piece = text[start:start + n]
        else:
            words = text.split()
            n = rng.randint(3, 7)
            if len(words) <= n:
                continue
            start = rng.randint(0, len(words) - n)
            piece = " ".join(words[start:start + n])
        if sum(c.isalpha() for c in piece) >= 8:
            out.append((label, piece))
    return out


def transfer_embedding(state, old_tokenizer_file, tok):
    """Maps the token embedding of `state` (a model of the tokenizer in
    old_tokenizer_file) onto the pieces of `tok`: the special ids keep their
    rows, and each new piece starts as the mean of the old rows of the old
    pieces that spell it (longest old piece first, from the left; a
    character no old piece holds takes <unk>'s row). The rest of the model is
    kept as it is, so a stage with a new tokenizer starts from what the
    encoder already knows instead of from a random initialisation."""
    import sentencepiece as spm
    old = spm.SentencePieceProcessor(model_file=old_tokenizer_file)
    old_ids = {old.id_to_piece(i): i + lm.ID_OFFSET for i in range(old.get_piece_size())
               if not (old.is_control(i) or old.is_unknown(i))}
    longest = max(len(p) for p in old_ids)
    key = "encoder.transformer.token_embedding.weight"
    table = state[key].float()
    if table.shape[0] != old.get_piece_size() + lm.ID_OFFSET:
        raise SystemExit("langid: the --init embedding has %d rows, %s makes %d"
                         % (table.shape[0], old_tokenizer_file,
                            old.get_piece_size() + lm.ID_OFFSET))
    new = torch.empty(tok.vocab_size, table.shape[1], dtype=table.dtype)
    new[:lm.UNK + 1] = table[:lm.UNK + 1]
    unknown_chars = 0
    for i in range(tok.sp.get_piece_size()):
        if tok.sp.is_control(i) or tok.sp.is_unknown(i):
            continue
        piece, rows, at = tok.sp.id_to_piece(i), [], 0
        while at < len(piece):
            end = min(len(piece), at + longest)
            while end > at and piece[at:end] not in old_ids:
                end -= 1
            if end == at:
                rows.append(lm.UNK)
                unknown_chars += 1
                end = at + 1
            else:
                rows.append(old_ids[piece[at:end]])
            at = end
        new[i + lm.ID_OFFSET] = table[rows].mean(0)
    print("embedding transferred from %s: %d rows -> %d, %d characters without an old piece"
          % (old_tokenizer_file, table.shape[0], tok.vocab_size, unknown_chars), flush=True)
    state[key] = new
    return state


def accuracy_report(name, preds, gold, labels):
    total = sum(p == g for p, g in zip(preds, gold)) / len(gold)
    per = {}
    for k, lab in enumerate(labels):
        idx = [i for i, g in enumerate(gold) if g == k]
        if idx:
            per[lab] = sum(preds[i] == k for i in idx) / len(idx)
    print("%s accuracy %.4f (%d texts): %s" % (name, total, len(gold), " ".join(
        "%s=%.3f" % kv for kv in per.items())), flush=True)
    return total, per


def save(model, path, dtype):
    """The state dict in the legacy pre-1.6 format, floating-point tensors
    as `dtype` (bfloat16 halves the file; encoderd widens them on load)."""
    state = model.state_dict()  # an OrderedDict with _metadata, kept as it is
    for k, v in state.items():
        if v.is_floating_point():
            state[k] = v.to(getattr(torch, dtype))
    torch.save(state, path, _use_new_zipfile_serialization=False)


def write_model_card(path, labels):
    """The model card, in the schema of docs/model_card.md."""
    lines = [
        "# encoderd model card of the bundled language identifier; written by",
        "# training/langid/train.py (see models/langid/README.md).",
        "family: torchtext-roberta",
        "checkpoint: model.pt",
        "num_heads: %d" % lm.ARCH["num_attention_heads"],
        "norm_first: false",
        "activation: gelu",
        "layer_norm_eps: 1.0e-5",
        "max_tokens: %d" % lm.MAX_TOKENS,
        "pad_token_id: %d" % lm.PAD,
        "position_rule: after_padding_idx",
        "pooling: cls",
        "head_activation: relu",
        "labels: [%s]" % ", ".join(labels),
        "tokenizer:",
        "  type: sentencepiece",
        "  file: sentencepiece.bpe.model",
        "  id_offset: %d" % lm.ID_OFFSET,
        "  bos_id: %d" % lm.BOS,
        "  eos_id: %d" % lm.EOS,
        "  pad_id: %d" % lm.PAD,
        "  unk_id: %d" % lm.UNK,
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="build/langid-data")
    ap.add_argument("--model-dir", default="models/langid")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--warmup", type=int, default=300)
    for source in langid_sources.SOURCES:
        ap.add_argument("--%s-cap" % source.name, type=int, default=0,
                        help="%s training texts per language (0: all)" % source.name)
    ap.add_argument("--threads", type=int, default=1,
                    help="intra-op threads (results are deterministic for a given count)")
    ap.add_argument("--sources", default="catalog,prose,dialogue",
                    help="training sources, comma-separated: "
                    + ", ".join(s.name for s in langid_sources.SOURCES))
    ap.add_argument("--fragments", type=float, default=0.0,
                    help="add, for this fraction of the prose, dialogue and games "
                    "training texts, a short fragment of it (3-7 words, 4-14 "
                    "characters in CJK) as an extra training text, chosen with --seed")
    ap.add_argument("--smoke", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "smoke_sentences.tsv"))
    ap.add_argument("--everyday", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "everyday_sentences.tsv"))
    ap.add_argument("--init", help="start from this state dict (a second "
                    "training stage) instead of a random initialisation")
    ap.add_argument("--init-tokenizer", help="the sentencepiece model --init was trained "
                    "with, when it is not MODEL_DIR's: the token embedding is mapped onto "
                    "the new pieces (transfer_embedding)")
    ap.add_argument("--save-dtype", choices=("float32", "bfloat16"), default="float32",
                    help="dtype of the weights written to model.pt; with bfloat16 the "
                    "model is rounded before the final evaluation, so the accuracies "
                    "printed last are those of the file written")
    args = ap.parse_args()
    if args.init_tokenizer and not args.init:
        ap.error("--init-tokenizer needs --init")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    t0 = time.time()
    labels = langid_data.LABELS
    tok = lm.Tokenizer(os.path.join(args.model_dir, "sentencepiece.bpe.model"))
    def load(name, cap=0):
        path = os.path.join(args.data, name + ".jsonl")
        rows = langid_data.read_jsonl(path) if os.path.exists(path) else []
        if cap:
            seen = collections.Counter()
            rows = [r for r in rows if seen.update([r[0]]) or seen[r[0]] <= cap]
        return rows

    def encode(rows):
        return ([tok.encode(t) for _, t in rows], [labels.index(lab) for lab, _ in rows])

    sources = langid_sources.select(args.sources)
    caps = {s.name: getattr(args, s.name + "_cap") for s in langid_sources.SOURCES}
    splits = {}
    for split in ("val", "test"):
        for source in langid_sources.SOURCES:
            splits["%s %s" % (source.name, split)] = encode(load(source.prefix + split))
    splits["smoke"] = encode(langid_data.read_smoke(args.smoke))
    splits["everyday"] = encode(langid_data.read_smoke(args.everyday))
    train_rows, sentence_rows = [], []
    for source in sources:
        rows = load(source.prefix + "train", caps[source.name])
        train_rows += rows
        if source.name in ("prose", "dialogue", "games"):
            sentence_rows += rows
    train_rows += fragments(sentence_rows, args.fragments, args.seed)
    # The evaluation sentences stay out of training, even when a source
    # happens to contain one of them.
    held_out = langid_data.held_out_texts((args.smoke, args.everyday))
    kept = [r for r in train_rows if langid_data.normalized(r[1]) not in held_out]
    if len(kept) != len(train_rows):
        print("dropped %d training texts equal to a smoke or everyday sentence"
              % (len(train_rows) - len(kept)))
    train_rows = kept
    enc, gold = encode(train_rows)
    model = lm.build_model(tok.vocab_size, len(labels))
    if args.init:
        state = torch.load(args.init, map_location="cpu")  # load_state_dict widens bf16
        if args.init_tokenizer:
            state = transfer_embedding(state, args.init_tokenizer, tok)
        model.load_state_dict(state)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(args.seed)
    steps_per_epoch = math.ceil(len(enc) / args.batch_size)
    total = steps_per_epoch * args.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(
        (s + 1) / args.warmup, max(0.0, (total - s) / max(1, total - args.warmup))))
    print("train %d texts, %d steps, %d parameters" % (
        len(enc), total, sum(p.numel() for p in model.parameters())), flush=True)
    step = 0
    for epoch in range(args.epochs):
        model.train()
        run_loss, run_n = 0.0, 0
        for batch in make_batches(enc, gold, args.batch_size, gen):
            x = lm.pad_batch([enc[i] for i in batch])
            y = torch.tensor([gold[i] for i in batch])
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            run_loss, run_n = run_loss + loss.item(), run_n + 1
            if step % 100 == 0:
                print("epoch %d step %d/%d loss %.4f lr %.2e %.0fs" % (
                    epoch, step, total, run_loss / run_n, sched.get_last_lr()[0],
                    time.time() - t0), flush=True)
                run_loss, run_n = 0.0, 0
        for split in [k for k in splits if k.endswith(" val")] + ["smoke"]:
            if not splits[split][0]:
                continue
            preds, _ = lm.predict(model, splits[split][0])
            accuracy_report("epoch %d %s" % (epoch, split), preds, splits[split][1], labels)
        save(model, os.path.join(args.model_dir, "model.pt"), args.save_dtype)
    if args.save_dtype != "float32":
        with torch.no_grad():  # evaluate what was written
            for t in model.state_dict().values():
                if t.is_floating_point():
                    t.copy_(t.to(getattr(torch, args.save_dtype)))
    for split in splits:
        if not splits[split][0]:
            continue
        preds, _ = lm.predict(model, splits[split][0])
        accuracy_report(split, preds, splits[split][1], labels)
    write_model_card(os.path.join(args.model_dir, "encoderd.yaml"), labels)
    print("training time %.0fs; wrote %s" % (time.time() - t0, args.model_dir))


if __name__ == "__main__":
    main()
