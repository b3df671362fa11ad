"""The langid model (torchtext RobertaModel + RobertaClassificationHead) and
its tokenization, shared by train.py and evaluate.py.

Token ids follow fairseq/XLM-R: <s>=0 <pad>=1 </s>=2 <unk>=3, every
sentencepiece id shifted by ID_OFFSET (spm's own <unk>, id 0, maps to 3).
A text becomes <s> pieces </s>; longer than MAX_TOKENS it keeps the first
MAX_TOKENS-1 ids and </s> (what encoderd's tokenizer does with truncate=true).
"""
import os
import sys

import torch

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(_REPO, "tests", "fixtures"))
import fxcommon  # noqa: E402

BOS, PAD, EOS, UNK = 0, 1, 2, 3
ID_OFFSET = 1
MAX_TOKENS = 128
# Positions are fairseq-style (pad_id + 1 .. pad_id + MAX_TOKENS), so the
# positional table needs MAX_TOKENS + pad_id + 1 rows.
MAX_SEQ_LEN = MAX_TOKENS + PAD + 1
ARCH = {"embedding_dim": 256, "ffn_dimension": 1024, "num_attention_heads": 4,
        "num_encoder_layers": 3, "dropout": 0.1}
LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm / TransformerEncoderLayer default


def build_model(vocab_size, num_classes):
    tt = fxcommon.import_torchtext()
    from torchtext.models import RobertaEncoderConf, RobertaModel
    from torchtext.models import RobertaClassificationHead
    assert tt is not None
    conf = RobertaEncoderConf(vocab_size=vocab_size, padding_idx=PAD,
                              max_seq_len=MAX_SEQ_LEN, **ARCH)
    head = RobertaClassificationHead(num_classes=num_classes,
                                     input_dim=ARCH["embedding_dim"])
    return RobertaModel(conf, head)


class Tokenizer:
    def __init__(self, model_file):
        import sentencepiece as spm
        self.sp = spm.SentencePieceProcessor(model_file=model_file)
        self.vocab_size = self.sp.get_piece_size() + ID_OFFSET

    def encode(self, text, max_tokens=MAX_TOKENS):
        ids = [BOS] + [UNK if i == self.sp.unk_id() else i + ID_OFFSET
                       for i in self.sp.encode(text)] + [EOS]
        if len(ids) > max_tokens:
            ids = ids[:max_tokens - 1] + [EOS]
        return ids


def pad_batch(seqs):
    width = max(len(s) for s in seqs)
    out = torch.full((len(seqs), width), PAD, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, :len(s)] = torch.tensor(s, dtype=torch.long)
    return out


@torch.no_grad()
def predict(model, encoded, batch_size=256):
    """Returns (argmax class ids, logits) for lists of token ids, in order.
    Batches are formed from length-sorted inputs to limit padding."""
    model.eval()
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    logits = torch.empty(len(encoded), model.head.out_proj.out_features)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        logits[idx] = model(pad_batch([encoded[i] for i in idx])).float()
    return logits.argmax(-1).tolist(), logits
