"""The benchmark's BERT-base-shaped model in PyTorch, built from the same
checkpoint encoderd loads (a Hugging Face BERT state dict): the embeddings
plus either an nn.TransformerEncoder stack (the paths PyTorch's users run:
slow path, fastpath, nested fastpath) or the same layers written as separate
ops the way Hugging Face's BertModel computes them (what gets exported to
ONNX). Both return the last hidden states, [batch, length, hidden], padded.
"""
import json
import pathlib

import torch
from torch import nn


def load_checkpoint(model_dir):
    model_dir = pathlib.Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    state = torch.load(model_dir / "pytorch_model.bin", map_location="cpu")
    return config, state


class Embeddings(nn.Module):
    def __init__(self, config, state):
        super().__init__()
        p = "bert.embeddings."
        self.word = nn.Embedding.from_pretrained(state[p + "word_embeddings.weight"])
        self.position = nn.Embedding.from_pretrained(state[p + "position_embeddings.weight"])
        self.token_type = nn.Embedding.from_pretrained(state[p + "token_type_embeddings.weight"])
        self.norm = nn.LayerNorm(config["hidden_size"], eps=config["layer_norm_eps"])
        self.norm.weight.data.copy_(state[p + "LayerNorm.weight"])
        self.norm.bias.data.copy_(state[p + "LayerNorm.bias"])

    def forward(self, ids):
        positions = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        x = self.word(ids) + self.position(positions) + self.token_type(torch.zeros_like(ids))
        return self.norm(x)


def layer_tensors(state, i):
    p = f"bert.encoder.layer.{i}."
    a = p + "attention."
    return {
        "qkv_w": torch.cat([state[a + f"self.{n}.weight"] for n in ("query", "key", "value")]),
        "qkv_b": torch.cat([state[a + f"self.{n}.bias"] for n in ("query", "key", "value")]),
        "out_w": state[a + "output.dense.weight"], "out_b": state[a + "output.dense.bias"],
        "norm1_w": state[a + "output.LayerNorm.weight"], "norm1_b": state[a + "output.LayerNorm.bias"],
        "in_w": state[p + "intermediate.dense.weight"], "in_b": state[p + "intermediate.dense.bias"],
        "ffo_w": state[p + "output.dense.weight"], "ffo_b": state[p + "output.dense.bias"],
        "norm2_w": state[p + "output.LayerNorm.weight"], "norm2_b": state[p + "output.LayerNorm.bias"],
    }


class TransformerEncoderBert(nn.Module):
    """Embeddings + nn.TransformerEncoder (post-norm, exact GELU, batch_first),
    as the BetterTransformer tutorial builds it. `nested` turns on
    enable_nested_tensor, the nested fastpath of PyTorch 1.13."""

    def __init__(self, config, state, nested):
        super().__init__()
        h = config["hidden_size"]
        self.embeddings = Embeddings(config, state)
        layer = nn.TransformerEncoderLayer(
            h, config["num_attention_heads"], config["intermediate_size"], dropout=0.0,
            activation="gelu", layer_norm_eps=config["layer_norm_eps"], batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, config["num_hidden_layers"],
                                             enable_nested_tensor=nested)
        for i, l in enumerate(self.encoder.layers):
            t = layer_tensors(state, i)
            l.self_attn.in_proj_weight.data.copy_(t["qkv_w"])
            l.self_attn.in_proj_bias.data.copy_(t["qkv_b"])
            l.self_attn.out_proj.weight.data.copy_(t["out_w"])
            l.self_attn.out_proj.bias.data.copy_(t["out_b"])
            l.norm1.weight.data.copy_(t["norm1_w"])
            l.norm1.bias.data.copy_(t["norm1_b"])
            l.linear1.weight.data.copy_(t["in_w"])
            l.linear1.bias.data.copy_(t["in_b"])
            l.linear2.weight.data.copy_(t["ffo_w"])
            l.linear2.bias.data.copy_(t["ffo_b"])
            l.norm2.weight.data.copy_(t["norm2_w"])
            l.norm2.bias.data.copy_(t["norm2_b"])

    def forward(self, ids, attention_mask):
        x = self.embeddings(ids)
        out = self.encoder(x, src_key_padding_mask=attention_mask == 0)
        # The nested path returns zeros at padded positions and may trim the
        # length to the longest sequence; callers read valid rows only.
        return out


class ExplicitBert(nn.Module):
    """The same model as separate ops, in Hugging Face BertModel's form
    (additive -10000 mask, erf GELU): the graph torch.onnx.export writes for
    ONNX Runtime, whose optimizer recognizes its attention and LayerNorm.
    linear_modules: the Linear layers as nn.Linear modules, which
    torch.ao.quantization.quantize_dynamic replaces with int8 ones."""

    def __init__(self, config, state, linear_modules=False):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config, state)
        self.layers = [
            {k: nn.Parameter(v, requires_grad=False) for k, v in layer_tensors(state, i).items()}
            for i in range(config["num_hidden_layers"])
        ]
        for i, t in enumerate(self.layers):
            for k, v in t.items():
                self.register_parameter(f"l{i}_{k}", v)
        self.linears = None
        if linear_modules:
            self.linears = nn.ModuleList()
            for t in self.layers:
                modules = nn.ModuleDict()
                for name in ("qkv", "out", "in", "ffo"):
                    w, b = t[name + "_w"], t[name + "_b"]
                    lin = nn.Linear(w.shape[1], w.shape[0])
                    lin.weight, lin.bias = w, b
                    modules[name] = lin
                self.linears.append(modules)

    def linear(self, i, name, x):
        if self.linears is not None:
            return self.linears[i][name](x)
        t = self.layers[i]
        return nn.functional.linear(x, t[name + "_w"], t[name + "_b"])

    def forward(self, ids, attention_mask):
        c = self.config
        h, heads = c["hidden_size"], c["num_attention_heads"]
        d = h // heads
        eps = c["layer_norm_eps"]
        b, n = ids.shape
        x = self.embeddings(ids)
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for i, t in enumerate(self.layers):
            qkv = self.linear(i, "qkv", x)
            q, k, v = qkv.split(h, dim=-1)
            q = q.view(b, n, heads, d).transpose(1, 2)
            k = k.view(b, n, heads, d).transpose(1, 2)
            v = v.view(b, n, heads, d).transpose(1, 2)
            scores = torch.matmul(q, k.transpose(-1, -2)) / (d ** 0.5) + bias
            ctx = torch.matmul(scores.softmax(-1), v).transpose(1, 2).reshape(b, n, h)
            x = nn.functional.layer_norm(
                x + self.linear(i, "out", ctx), (h,), t["norm1_w"], t["norm1_b"], eps)
            f = nn.functional.gelu(self.linear(i, "in", x))
            x = nn.functional.layer_norm(
                x + self.linear(i, "ffo", f), (h,), t["norm2_w"], t["norm2_b"], eps)
        return x


def padded(sequences, pad_id=0):
    """ids [batch, longest] and attention_mask (1 = token) as int64 tensors."""
    longest = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), longest), dtype=torch.long)
    for i, s in enumerate(sequences):
        ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, :len(s)] = 1
    return ids, mask


def packed_rows(hidden, sequences):
    """The valid rows of a padded [batch, length, hidden] output, sequence after
    sequence, as float32 [total_tokens, hidden]."""
    return torch.cat([hidden[i, :len(s)].float() for i, s in enumerate(sequences)])
