#!/usr/bin/python3
"""End-to-end test of text pairs and Rerank: the real `encoderd serve` with a
BERT cross-encoder (one-output head), an XLM-R pair classifier, a DistilBERT
model (no token types) and a generic nn.TransformerEncoder stack (no pair
format), fairseq's checkpoint of an XLM-R classifier, an MPNet classifier
(RoBERTa's pair form, the relative attention bias), a DeBERTa-v2 classifier
(its spm.model read as DebertaV2Tokenizer, the disentangled attention), plus a BERT folder
whose only tokenizer file is a tokenizer.json of a pipeline encoderd does
not read (it serves token ids; text requests are refused without the
server's paths), checked against PyTorch on the fixtures' own weights
(tests/fixtures/fx_models.py's hf_forward over the ids and token types the
server's Tokenize reports).

usage: pairs_e2e_test.py --binary build/cli/encoderd --source-dir REPO
       --models-dir build/fixtures/models
       [--loadtest build/loadtest/encoderd-loadtest]
Exits 0 when every check passed; prints each failed check.
"""
import argparse
import json
import math
import pathlib
import re
import shutil
import struct
import sys
import tempfile

import grpc

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixtures"))
from e2e_common import (check, generate_stubs, report, run_loadtest,  # noqa: E402
                        start_daemon, wait_serving)

MAX_TOKENS = 32
MODELS = {"cross": "hf_bert_cross_encoder", "xlmr": "hf_xlmr_zip",
          "distil": "hf_distilbert_base", "generic": "generic_postnorm_gelu",
          "fairseq": "fairseq_xlmr_legacy", "mpnet": "hf_mpnet_classifier",
          "deberta": "hf_deberta_classifier"}
CROSS_ACTIVATIONS = {"cross_logits": "torch.nn.modules.linear.Identity",
                     "cross_tanh": "torch.nn.modules.activation.Tanh"}
QUERY = "how do foxes hunt"
PROMPT = "question: "
PASSAGE = "passage: "
TEXTS = ["the quick brown fox jumps over the lazy dog", "foxes hunt mice at night",
         "a recipe for bread", "x", "the fox", "hunting " * 40]


def unit(values):
    norm = sum(v * v for v in values) ** 0.5
    return [v / norm for v in values]


def near(a, b, tol):
    return len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b))


def check_dimensions(pb, stub, info):
    """Embed's dimensions and a folder's truncate_dim: the first values of
    the embedding, unit length again (both folders normalize)."""
    check(info["st_dense"].embedding_size == 32 and info["st_dense"].max_dimensions == 32 and
          info["st_cut"].embedding_size == 8 and info["st_cut"].max_dimensions == 32 and
          info["st_cut"].default_normalize, f"ModelInfo sizes: {info['st_cut']}")
    whole = [list(e.values) for e in
             stub.Embed(pb.EmbedRequest(model="st_dense", texts=TEXTS[:3])).embeddings]
    cut = [list(e.values) for e in
           stub.Embed(pb.EmbedRequest(model="st_cut", texts=TEXTS[:3])).embeddings]
    check(len(cut) == 3 and all(near(c, unit(w[:8]), 1e-6) for c, w in zip(cut, whole)),
          "truncate_dim 8: the first 8 values, unit length")
    four = [list(e.values) for e in stub.Embed(
        pb.EmbedRequest(model="st_dense", texts=TEXTS[:3], dimensions=4)).embeddings]
    check(all(near(c, unit(w[:4]), 1e-6) for c, w in zip(four, whole)),
          "dimensions 4: the first 4 values, unit length")
    again = [list(e.values) for e in stub.Embed(
        pb.EmbedRequest(model="st_cut", texts=TEXTS[:3], dimensions=32)).embeddings]
    check(again == whole, "dimensions 32 over truncate_dim 8: the whole embedding")


def pooled(rows, start, mode):
    """sentence-transformers' Pooling over one sequence's token rows, the
    tokens before `start` masked out (include_prompt = false)."""
    if mode == "cls":
        return rows[0]
    kept = list(range(start, len(rows)))
    columns = range(len(rows[0]))
    if mode == "max":
        return [max(rows[t][i] for t in kept) for i in columns]
    weights = {t: (t + 1 if mode == "weightedmean" else 1) for t in kept}
    total = sum(weights.values())
    return [sum(weights[t] * rows[t][i] for t in kept) / total for i in columns]


def check_include_prompt(pb, stub, info):
    """A Pooling module with include_prompt false (mean, Normalize):
    Embed pools only the tokens after a non-empty prompt's, which number
    the prompt's own encoding less its [SEP]; against Encode's token
    states of the same prompted texts."""
    check(info["st_no_prompt"].prompt_excluded_from_pooling and
          not info["st_dense"].prompt_excluded_from_pooling,
          "ModelInfo prompt_excluded_from_pooling")
    alone = stub.Tokenize(pb.TokenizeRequest(model="st_no_prompt", texts=[PROMPT]))
    prompt_ids = list(alone.tokenizations[0].ids)
    start = len(prompt_ids) - 1  # [CLS] and the prompt's tokens
    texts = TEXTS[:3] + [TEXTS[5]]
    for prompt_name, mode, wire in (("query", "mean", pb.POOLING_DEFAULT),
                                    ("query", "weightedmean", pb.POOLING_WEIGHTED_MEAN),
                                    ("query", "max", pb.POOLING_MAX),
                                    ("query", "cls", pb.POOLING_CLS),
                                    ("document", "mean", pb.POOLING_DEFAULT)):
        first = start if prompt_name == "query" else 0  # the document prompt is empty
        states = stub.Encode(pb.EncodeRequest(model="st_no_prompt", texts=texts, truncate=True,
                                              prompt_name=prompt_name)).sequences
        got = stub.Embed(pb.EmbedRequest(model="st_no_prompt", texts=texts, truncate=True,
                                         prompt_name=prompt_name, pooling=wire)).embeddings
        for i, seq in enumerate(states):
            width = len(seq.values) // seq.num_tokens
            rows = [seq.values[t * width:(t + 1) * width] for t in range(seq.num_tokens)]
            want = unit(pooled(rows, first, mode))
            check(near(list(got[i].values), want, 1e-5),
                  f"include_prompt false, prompt {prompt_name}, {mode}, text {i}: Embed pools "
                  f"tokens {first}.. of {seq.num_tokens}")
            if first > 0 and mode == "mean":
                check(not near(list(got[i].values), unit(pooled(rows, 0, mode)), 1e-4),
                      f"text {i}: the prompt's tokens are not pooled")


def read_canonical(ref_dir):
    """The fixture's reference weights (fxcommon.write_tensor_dump) as torch tensors."""
    import torch
    d = pathlib.Path(ref_dir) / "canonical"
    out = {}
    for name, entry in json.loads((d / "index.json").read_text()).items():
        raw = (d / entry["file"]).read_bytes()
        values = struct.unpack(f"<{len(raw) // 4}f", raw)
        out[name] = torch.tensor(values, dtype=torch.float32).reshape(entry["shape"])
    return out


def torch_logits(models_dir, name, kind, tokenizations):
    """hf_forward's logits for each (ids, token types) the server reported."""
    import torch
    import fx_models
    ref = pathlib.Path(models_dir) / (name + ".reference")
    expected = json.loads((ref / "expected.json").read_text())
    c = read_canonical(ref)
    if expected["family"] == "deberta-v2":  # the attention's layout, from config.json
        config = json.loads((pathlib.Path(models_dir) / name / "config.json").read_text())
        columns = json.loads((ref / "relative_columns.json").read_text())
        terms = config["pos_att_type"]
        c["deberta.layout"] = (columns["span"], columns["buckets"], columns["max_relative"],
                               terms.split("|") if isinstance(terms, str) else terms)
        c["deberta.eps"] = expected["layer_norm_eps"]
    out = []
    with torch.no_grad():
        for t in tokenizations:
            types = list(t.token_type_ids) or [0] * len(t.ids)
            _, logits = fx_models.hf_forward(c, kind, list(t.ids), types,
                                             expected["pad_token_id"], expected["layer_norm_eps"],
                                             head_act=expected["head_activation"])
            out.append(logits.tolist())
    return out


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def softmax(v):
    top = max(v)
    e = [math.exp(x - top) for x in v]
    return [x / sum(e) for x in e]


def code_of(fn):
    try:
        fn()
    except grpc.RpcError as e:
        return e.code(), e.details()
    return grpc.StatusCode.OK, ""


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--source-dir", required=True)
    p.add_argument("--models-dir", required=True)
    p.add_argument("--loadtest", help="also run encoderd-loadtest --rpc rerank")
    args = p.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="encoderd_pairs_e2e_"))
    generate_stubs(args.source_dir, tmp)
    from proto import encoderd_pb2 as pb, encoderd_pb2_grpc as pb_grpc
    from health_v1 import health_pb2, health_pb2_grpc

    # Found by name, a WordLevel tokenizer.json leaves the folder without a
    # tokenizer: it loads, and the log says why.
    unread = tmp / "unread_tokenizer_json"
    shutil.copytree(pathlib.Path(args.models_dir) / "hf_bert_legacy", unread)
    (unread / "vocab.txt").unlink()
    (unread / "tokenizer.json").write_text('{"model": {"type": "WordLevel", "vocab": {"a": 0}}}')
    directories = {name: f"{args.models_dir}/{fixture}" for name, fixture in MODELS.items()}
    directories["unread"] = str(unread)
    # The cross-encoder again, its config.json naming the activation
    # sentence-transformers' CrossEncoder applies (the ms-marco models name
    # Identity): its scores follow it.
    for name, activation in CROSS_ACTIVATIONS.items():
        folder = tmp / name
        shutil.copytree(pathlib.Path(args.models_dir) / MODELS["cross"], folder)
        config = json.loads((folder / "config.json").read_text())
        config["sbert_ce_default_activation_function"] = activation
        (folder / "config.json").write_text(json.dumps(config))
        directories[name] = str(folder)
    # The cross-encoder as sentence-transformers 5.4+ saves a CrossEncoder:
    # one Transformer module, the activation in
    # config_sentence_transformers.json (it comes before config.json's).
    folder = tmp / "cross_st54"
    shutil.copytree(pathlib.Path(args.models_dir) / MODELS["cross"], folder)
    config = json.loads((folder / "config.json").read_text())
    config["sentence_transformers"] = {"activation_fn": "torch.nn.modules.activation.Sigmoid"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "modules.json").write_text(json.dumps([{
        "idx": 0, "name": "0", "path": "",
        "type": "sentence_transformers.base.modules.transformer.Transformer"}]))
    (folder / "sentence_bert_config.json").write_text(json.dumps({
        "transformer_task": "sequence-classification",
        "modality_config": {"text": {"method": "forward", "method_output_name": "logits"}},
        "module_output_name": "scores"}))
    (folder / "config_sentence_transformers.json").write_text(json.dumps({
        "model_type": "CrossEncoder", "activation_fn": "torch.nn.modules.linear.Identity",
        "prompts": {"query": "", "document": ""}, "default_prompt_name": None}))
    directories["cross_st54"] = str(folder)
    # The same with a default prompt: sentence-transformers puts it in front
    # of a pair's first text (Rerank's query).
    prompted = tmp / "cross_prompt"
    shutil.copytree(folder, prompted)
    (prompted / "config_sentence_transformers.json").write_text(json.dumps({
        "model_type": "CrossEncoder", "activation_fn": "torch.nn.modules.linear.Identity",
        "prompts": {"query": PROMPT, "document": "", "passage": PASSAGE},
        "default_prompt_name": "query"}))
    directories["cross_prompt"] = str(prompted)
    # A sentence-transformers folder (Dense 64 -> 32, Normalize) as it is, and
    # saved with truncate_dim 8 (sentence-transformers 5.4+ keeps it in
    # config_sentence_transformers.json): its embeddings have 8 values.
    directories["st_dense"] = f"{args.models_dir}/hf_st_dense"
    cut = tmp / "st_cut"
    shutil.copytree(pathlib.Path(args.models_dir) / "hf_st_dense", cut)
    (cut / "config_sentence_transformers.json").write_text(json.dumps({"truncate_dim": 8}))
    directories["st_cut"] = str(cut)
    # A mean-pooling folder whose Pooling module leaves the prompt's tokens
    # out (sentence-transformers' include_prompt false).
    no_prompt = tmp / "st_no_prompt"
    shutil.copytree(pathlib.Path(args.models_dir) / "hf_st_mean_normalize", no_prompt)
    pooling_config = no_prompt / "1_Pooling" / "config.json"
    pooling_config.write_text(json.dumps(dict(json.loads(pooling_config.read_text()),
                                              include_prompt=False)))
    (no_prompt / "config_sentence_transformers.json").write_text(json.dumps({
        "prompts": {"query": PROMPT, "document": ""}, "default_prompt_name": None}))
    directories["st_no_prompt"] = str(no_prompt)
    serve_args = []
    for i, (name, directory) in enumerate(directories.items()):
        serve_args += ["--set", f"models[{i}].name={name}",
                       "--set", f"models[{i}].directory={directory}",
                       "--set", f"models[{i}].max_tokens={MAX_TOKENS}",
                       "--set", f"models[{i}].max_client_batch_size=8"]
    daemon = start_daemon(args.binary, serve_args, tmp / "server.log")
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{daemon.port}")
        grpc.channel_ready_future(channel).result(timeout=60)
        stub = pb_grpc.EncoderStub(channel)
        if not check(wait_serving(health_pb2, health_pb2_grpc.HealthStub(channel),
                                  list(directories)),
                     "every model SERVING"):
            return 1

        info = {m.name: m for m in stub.ModelInfo(pb.ModelInfoRequest()).models}
        check(info["cross"].text_pairs and info["cross"].rerank, "cross-encoder: pairs, rerank")
        check(info["xlmr"].text_pairs and not info["xlmr"].rerank, "xlmr: pairs, no rerank")
        check(info["cross"].head_output == "sigmoid" and info["xlmr"].head_output == "softmax"
              and info["distil"].head_output == "", "ModelInfo head_output")
        check(not info["generic"].text_pairs, "generic stack reads no pairs")

        # The templates, as Tokenize reports them, against the single texts.
        single = stub.Tokenize(pb.TokenizeRequest(model="cross", texts=["the fox", "at night"]))
        a, b = (list(t.ids) for t in single.tokenizations)
        pair = stub.Tokenize(pb.TokenizeRequest(model="cross", texts=["the fox"],
                                                text_pairs=["at night"])).tokenizations[0]
        check(list(pair.ids) == a + b[1:], f"BERT pair is [CLS] a [SEP] b [SEP]: {list(pair.ids)}")
        check(list(pair.token_type_ids) == [0] * len(a) + [1] * (len(b) - 1),
              f"BERT pair types: {list(pair.token_type_ids)}")
        single = stub.Tokenize(pb.TokenizeRequest(model="xlmr", texts=["the fox", "at night"]))
        a, b = (list(t.ids) for t in single.tokenizations)
        pair = stub.Tokenize(pb.TokenizeRequest(model="xlmr", texts=["the fox"],
                                                text_pairs=["at night"])).tokenizations[0]
        check(list(pair.ids) == a + [a[-1]] + b[1:],
              f"RoBERTa pair is <s> a </s></s> b </s>: {list(pair.ids)}")
        check(len(pair.token_type_ids) == 0, "RoBERTa pair: no token types")
        pair = stub.Tokenize(pb.TokenizeRequest(model="distil", texts=["the fox"],
                                                text_pairs=["at night"])).tokenizations[0]
        check(len(pair.token_type_ids) == 0, "DistilBERT (no type table): no token types")
        long_pair = stub.Tokenize(pb.TokenizeRequest(model="cross", texts=[TEXTS[5]],
                                                     text_pairs=[QUERY], truncate=True))
        t = long_pair.tokenizations[0]
        check(len(t.ids) == MAX_TOKENS and t.untruncated_length > MAX_TOKENS,
              f"a long pair is cut to max_tokens: {len(t.ids)} of {t.untruncated_length}")

        # Rerank against PyTorch: sigmoid of the head's logit of (query, text).
        rr = stub.Rerank(pb.RerankRequest(model="cross", query=QUERY, texts=TEXTS, truncate=True,
                                          return_texts=True))
        toks = stub.Tokenize(pb.TokenizeRequest(model="cross", texts=[QUERY] * len(TEXTS),
                                                text_pairs=TEXTS, truncate=True)).tokenizations
        want = [sigmoid(l[0]) for l in torch_logits(args.models_dir, MODELS["cross"], "bert", toks)]
        check(sorted(r.index for r in rr.results) == list(range(len(TEXTS))),
              "Rerank returns every text once")
        for r in rr.results:
            check(abs(r.score - want[r.index]) <= 1e-4,
                  f"Rerank score of text {r.index}: {r.score} vs PyTorch {want[r.index]}")
            check(r.text == TEXTS[r.index], f"Rerank return_texts of {r.index}")
        scores = [r.score for r in rr.results]
        check(scores == sorted(scores, reverse=True), f"Rerank is best first: {scores}")
        check(rr.token_count == sum(len(t.ids) for t in toks), "Rerank token_count")
        top = stub.Rerank(pb.RerankRequest(model="cross", query=QUERY, texts=TEXTS, truncate=True,
                                           top_n=2))
        check([r.index for r in top.results] == [r.index for r in rr.results[:2]] and
              all(r.text == "" for r in top.results), "Rerank top_n=2 without texts")
        cls = stub.Classify(pb.ClassifyRequest(model="cross", texts=[QUERY] * len(TEXTS),
                                               text_pairs=TEXTS, truncate=True))
        by_index = {r.index: r.score for r in rr.results}
        check(all(abs(c.scores[0] - by_index[i]) <= 1e-6 for i, c in enumerate(cls.results)),
              "Classify of a one-output head gives the Rerank score (sigmoid)")
        # The same head with the activation its config.json names.
        logits = [l[0] for l in torch_logits(args.models_dir, MODELS["cross"], "bert", toks)]
        for name, output, fn in (("cross_logits", "logits", lambda x: x),
                                 ("cross_tanh", "tanh", math.tanh),
                                 ("cross_st54", "logits", lambda x: x)):
            check(info[name].head_output == output and info[name].rerank,
                  f"{name}: ModelInfo head_output {info[name].head_output}")
            named = stub.Rerank(pb.RerankRequest(model=name, query=QUERY, texts=TEXTS,
                                                 truncate=True))
            check(sorted(r.index for r in named.results) == list(range(len(TEXTS))) and
                  all(abs(r.score - fn(logits[r.index])) <= 1e-4 for r in named.results),
                  f"{name}: Rerank scores are {output} of PyTorch's logits: "
                  f"{[(r.index, r.score) for r in named.results]} vs {logits}")
            check([r.index for r in named.results] == [r.index for r in rr.results],
                  f"{name}: the same order as the sigmoid's")

        # The default prompt goes in front of the query and of a pair's
        # first text, as if the client had sent it.
        check(info["cross_prompt"].default_prompt == PROMPT and
              info["cross_st54"].default_prompt == "", "ModelInfo default_prompt")
        got = stub.Tokenize(pb.TokenizeRequest(model="cross_prompt", texts=["the fox"],
                                               text_pairs=["at night"])).tokenizations[0]
        want = stub.Tokenize(pb.TokenizeRequest(model="cross_st54", texts=[PROMPT + "the fox"],
                                                text_pairs=["at night"])).tokenizations[0]
        check(list(got.ids) == list(want.ids), f"Tokenize with the prompt: {list(got.ids)}")
        got = stub.Tokenize(pb.TokenizeRequest(model="cross_prompt", texts=["the fox"]))
        want = stub.Tokenize(pb.TokenizeRequest(model="cross_st54", texts=[PROMPT + "the fox"]))
        check(list(got.tokenizations[0].ids) == list(want.tokenizations[0].ids),
              "Tokenize of a single text with the prompt")
        got = stub.Rerank(pb.RerankRequest(model="cross_prompt", query=QUERY, texts=TEXTS,
                                           truncate=True))
        want = stub.Rerank(pb.RerankRequest(model="cross_st54", query=PROMPT + QUERY,
                                            texts=TEXTS, truncate=True))
        alone = stub.Rerank(pb.RerankRequest(model="cross_st54", query=QUERY, texts=TEXTS,
                                             truncate=True))
        by_index = {r.index: r.score for r in want.results}
        check(all(abs(r.score - by_index[r.index]) <= 1e-5 for r in got.results),
              f"Rerank with the prompt: {[(r.index, r.score) for r in got.results]} vs "
              f"{sorted(by_index.items())}")
        check(any(abs(a.score - b.score) > 1e-4 for a, b in zip(
            sorted(got.results, key=lambda r: r.index),
            sorted(alone.results, key=lambda r: r.index))), "the prompt changes the scores")
        got = stub.Classify(pb.ClassifyRequest(model="cross_prompt", texts=[QUERY],
                                               text_pairs=[TEXTS[0]], truncate=True))
        want = stub.Classify(pb.ClassifyRequest(model="cross_st54", texts=[PROMPT + QUERY],
                                                text_pairs=[TEXTS[0]], truncate=True))
        check(abs(got.results[0].scores[0] - want.results[0].scores[0]) <= 1e-5,
              f"Classify with the prompt: {list(got.results[0].scores)} vs "
              f"{list(want.results[0].scores)}")
        code, details = code_of(lambda: stub.Tokenize(pb.TokenizeRequest(
            model="cross_prompt", texts=[""])))
        check(code == grpc.StatusCode.INVALID_ARGUMENT and "texts[0] is empty" in details,
              f"an empty text is refused as sent, not as prompted: {code} {details!r}")
        # A request may name another of the model's prompts (prompt_name),
        # an empty one included, in each RPC that takes texts.
        check(dict(info["cross_prompt"].prompts) == {"query": PROMPT, "document": "",
                                                     "passage": PASSAGE} and
              info["cross_prompt"].default_prompt_name == "query" and
              dict(info["cross"].prompts) == {}, f"ModelInfo prompts: {info['cross_prompt']}")
        check_dimensions(pb, stub, info)
        check_include_prompt(pb, stub, info)
        for name, prompt in (("passage", PASSAGE), ("document", ""), ("query", PROMPT)):
            got = stub.Tokenize(pb.TokenizeRequest(model="cross_prompt", texts=["the fox"],
                                                   text_pairs=["at night"], prompt_name=name))
            want = stub.Tokenize(pb.TokenizeRequest(model="cross_st54",
                                                    texts=[prompt + "the fox"],
                                                    text_pairs=["at night"]))
            check(list(got.tokenizations[0].ids) == list(want.tokenizations[0].ids),
                  f"Tokenize with prompt_name {name}")
        got = stub.Rerank(pb.RerankRequest(model="cross_prompt", query=QUERY, texts=TEXTS,
                                           truncate=True, prompt_name="passage"))
        want = stub.Rerank(pb.RerankRequest(model="cross_st54", query=PASSAGE + QUERY,
                                            texts=TEXTS, truncate=True))
        by_index = {r.index: r.score for r in want.results}
        check(all(abs(r.score - by_index[r.index]) <= 1e-5 for r in got.results),
              f"Rerank with prompt_name passage: {[(r.index, r.score) for r in got.results]} "
              f"vs {sorted(by_index.items())}")
        got = stub.Classify(pb.ClassifyRequest(model="cross_prompt", texts=[QUERY],
                                               text_pairs=[TEXTS[0]], truncate=True,
                                               prompt_name="document"))
        want = stub.Classify(pb.ClassifyRequest(model="cross_st54", texts=[QUERY],
                                                text_pairs=[TEXTS[0]], truncate=True))
        check(abs(got.results[0].scores[0] - want.results[0].scores[0]) <= 1e-5,
              "Classify with prompt_name document (empty): no prompt")
        got = stub.Encode(pb.EncodeRequest(model="cross_prompt", texts=[QUERY],
                                           prompt_name="passage"))
        want = stub.Encode(pb.EncodeRequest(model="cross_st54", texts=[PASSAGE + QUERY]))
        check(got.sequences[0].num_tokens == want.sequences[0].num_tokens and
              max(abs(a - b) for a, b in zip(got.sequences[0].values,
                                             want.sequences[0].values)) <= 1e-5,
              "Encode with prompt_name passage")
        got = stub.Embed(pb.EmbedRequest(model="cross_prompt", texts=[QUERY], prompt_name="passage",
                                         pooling=pb.POOLING_MEAN))
        want = stub.Embed(pb.EmbedRequest(model="cross_st54", texts=[PASSAGE + QUERY],
                                          pooling=pb.POOLING_MEAN))
        check(max(abs(a - b) for a, b in zip(got.embeddings[0].values,
                                             want.embeddings[0].values)) <= 1e-5,
              "Embed with prompt_name passage")

        # A pair classifier with the RoBERTa template, against PyTorch.
        firsts, seconds = TEXTS[:4], list(reversed(TEXTS[:4]))
        cls = stub.Classify(pb.ClassifyRequest(model="xlmr", texts=firsts, text_pairs=seconds,
                                               truncate=True))
        toks = stub.Tokenize(pb.TokenizeRequest(model="xlmr", texts=firsts, text_pairs=seconds,
                                                truncate=True)).tokenizations
        for i, logits in enumerate(torch_logits(args.models_dir, MODELS["xlmr"], "roberta", toks)):
            want = softmax(logits)
            got = list(cls.results[i].scores)
            check(max(abs(x - y) for x, y in zip(got, want)) <= 1e-4,
                  f"xlmr pair {i}: {got} vs PyTorch {want}")
        # fairseq's own checkpoint of an XLM-R classifier: the same template
        # and Hugging Face's forward over its weights (post-norm, tanh head).
        cls = stub.Classify(pb.ClassifyRequest(model="fairseq", texts=firsts, text_pairs=seconds,
                                               truncate=True))
        toks = stub.Tokenize(pb.TokenizeRequest(model="fairseq", texts=firsts,
                                                text_pairs=seconds, truncate=True)).tokenizations
        check(all(len(t.token_type_ids) == 0 for t in toks), "fairseq pair: no token types")
        for i, logits in enumerate(torch_logits(args.models_dir, MODELS["fairseq"], "roberta",
                                                toks)):
            want = softmax(logits)
            got = list(cls.results[i].scores)
            check(max(abs(x - y) for x, y in zip(got, want)) <= 1e-4,
                  f"fairseq pair {i}: {got} vs PyTorch {want}")
        # MPNet (its tokenizer.json): <s> a </s></s> b </s>, no token types,
        # every layer's relative attention bias; against hf_forward.
        cls = stub.Classify(pb.ClassifyRequest(model="mpnet", texts=firsts, text_pairs=seconds,
                                               truncate=True))
        toks = stub.Tokenize(pb.TokenizeRequest(model="mpnet", texts=firsts, text_pairs=seconds,
                                                truncate=True)).tokenizations
        check(all(len(t.token_type_ids) == 0 for t in toks), "mpnet pair: no token types")
        check(all(t.ids[0] == 0 and t.ids[-1] == 2 and
                  any(a == b == 2 for a, b in zip(t.ids, t.ids[1:])) for t in toks),
              "mpnet pair: <s> a </s></s> b </s>")
        for i, logits in enumerate(torch_logits(args.models_dir, MODELS["mpnet"], "roberta", toks)):
            want = softmax(logits)
            got = list(cls.results[i].scores)
            check(max(abs(x - y) for x, y in zip(got, want)) <= 1e-4,
                  f"mpnet pair {i}: {got} vs PyTorch {want}")
        # DeBERTa-v2: [CLS] a [SEP] b [SEP] with the spm.model's own ids (as
        # DebertaV2Tokenizer: python3-sentencepiece's), no token types read,
        # every layer's disentangled attention; against hf_forward.
        import sentencepiece
        sp = sentencepiece.SentencePieceProcessor(
            model_file=f"{args.models_dir}/{MODELS['deberta']}/spm.model")
        cls = stub.Classify(pb.ClassifyRequest(model="deberta", texts=firsts, text_pairs=seconds,
                                               truncate=True))
        toks = stub.Tokenize(pb.TokenizeRequest(model="deberta", texts=firsts,
                                                text_pairs=seconds, truncate=True)).tokenizations
        for i, t in enumerate(toks):
            want = [1] + sp.encode(firsts[i]) + [2] + sp.encode(seconds[i]) + [2]
            check(t.untruncated_length > len(t.ids) or list(t.ids) == want,
                  f"deberta pair {i} ids: {list(t.ids)} vs sentencepiece {want}")
        for i, logits in enumerate(torch_logits(args.models_dir, MODELS["deberta"], "bert", toks)):
            want = softmax(logits)
            got = list(cls.results[i].scores)
            check(max(abs(x - y) for x, y in zip(got, want)) <= 1e-4,
                  f"deberta pair {i}: {got} vs PyTorch {want}")
        emb = stub.Embed(pb.EmbedRequest(model="distil", texts=["the fox"], text_pairs=["at night"]))
        check(len(emb.embeddings) == 1, "DistilBERT embeds a pair")

        # Refusals name what is wrong.
        for what, call, want_code, part in [
            ("Rerank on a two-label model", lambda: stub.Rerank(pb.RerankRequest(
                model="xlmr", query=QUERY, texts=TEXTS[:2])),
             grpc.StatusCode.FAILED_PRECONDITION, "not a cross-encoder"),
            ("pairs on a generic stack", lambda: stub.Embed(pb.EmbedRequest(
                model="generic", texts=["the fox"], text_pairs=["at night"])),
             grpc.StatusCode.FAILED_PRECONDITION, "no text-pair format"),
            ("text_pairs count", lambda: stub.Classify(pb.ClassifyRequest(
                model="cross", texts=["a", "b"], text_pairs=["c"])),
             grpc.StatusCode.INVALID_ARGUMENT, "1 text_pairs for 2 texts"),
            ("empty query", lambda: stub.Rerank(pb.RerankRequest(model="cross", texts=["a"])),
             grpc.StatusCode.INVALID_ARGUMENT, "query is empty"),
            ("empty text", lambda: stub.Rerank(pb.RerankRequest(model="cross", query="q",
                                                                texts=["a", ""])),
             grpc.StatusCode.INVALID_ARGUMENT, "texts[1] is empty"),
            ("over-long pair", lambda: stub.Rerank(pb.RerankRequest(
                model="cross", query=QUERY, texts=["x", TEXTS[5]])),
             grpc.StatusCode.INVALID_ARGUMENT, "texts[1]: text pair is"),
            ("negative top_n", lambda: stub.Rerank(pb.RerankRequest(
                model="cross", query=QUERY, texts=["a"], top_n=-1)),
             grpc.StatusCode.INVALID_ARGUMENT, "top_n"),
            ("pairs with token_ids", lambda: stub.Encode(pb.EncodeRequest(
                model="cross", token_ids=[pb.TokenIds(ids=[1, 2])], text_pairs=["a"])),
             grpc.StatusCode.INVALID_ARGUMENT, "text_pairs go with texts"),
            ("a prompt_name with token_ids", lambda: stub.Encode(pb.EncodeRequest(
                model="cross_prompt", token_ids=[pb.TokenIds(ids=[1, 2])],
                prompt_name="passage")),
             grpc.StatusCode.INVALID_ARGUMENT, "prompt_name goes with texts, not with token_ids"),
            ("an unknown prompt_name", lambda: stub.Rerank(pb.RerankRequest(
                model="cross_prompt", query="q", texts=["a"], prompt_name="Passage")),
             grpc.StatusCode.INVALID_ARGUMENT,
             "prompt_name \"Passage\" is not a prompt of model 'cross_prompt' (its prompts: "
             "\"document\", \"passage\", \"query\")"),
            ("a prompt_name on a model without prompts", lambda: stub.Classify(
                pb.ClassifyRequest(model="cross", texts=["a"], prompt_name="query")),
             grpc.StatusCode.INVALID_ARGUMENT, "model 'cross' has no prompts"),
        ]:
            code, details = code_of(call)
            check(code == want_code and part in details, f"{what}: {code} {details!r}")
        # Two calls on "cross", one on each of its copies, five on
        # cross_st54 and cross_prompt.
        rerank_ok = 2 + len(CROSS_ACTIVATIONS) + 1 + 5
        check(daemon.metric("encoderd_requests_total",
                            {"rpc": "Rerank", "code": "OK"}) == rerank_ok,
              "Rerank counted in encoderd_requests_total")

        # The folder whose tokenizer.json is not read serves token ids; text
        # requests say why not, without the server's paths.
        code, details = code_of(lambda: stub.Embed(pb.EmbedRequest(model="unread",
                                                                   texts=["the fox"])))
        check(code == grpc.StatusCode.FAILED_PRECONDITION and details ==
              "model 'unread' has no tokenizer (its tokenizer file is not one encoderd reads; "
              "the server's log says why); send token_ids",
              f"texts to a folder whose tokenizer.json is not read: {code} {details!r}")
        enc = stub.Encode(pb.EncodeRequest(model="unread", token_ids=[pb.TokenIds(ids=[2, 5, 3])]))
        check(len(enc.sequences) == 1 and enc.sequences[0].num_tokens == 3,
              "that folder encodes token ids")
        log = (tmp / "server.log").read_text()
        check(re.search(r"unread_tokenizer_json/tokenizer\.json.*WordLevel", log) is not None,
              "the server's log names the unread tokenizer.json and its model type")
        if args.loadtest:
            n = 40
            r = run_loadtest(args.loadtest, f"127.0.0.1:{daemon.port}", tmp, "rerank",
                             "--model", "cross", "--rpc", "rerank", "--requests", str(n),
                             "--duration", "0", "--warmup", "0", "--texts", "3")
            if r is not None:
                check(r["requests_ok"] == n and r["requests_error"] == 0 and r["texts"] == 3 * n,
                      f"loadtest --rpc rerank: {n} OK calls of 3 texts: {r['requests_ok']}, "
                      f"{r['requests_error']} errors, {r['texts']} texts")
                check(daemon.metric("encoderd_requests_total",
                                    {"rpc": "Rerank", "code": "OK"}) == rerank_ok + n,
                      "the loadtest's Rerank calls reached the server")
            # --prompt-name reaches the server in every call: a name the
            # model has is served, one it has not is refused each time.
            r = run_loadtest(args.loadtest, f"127.0.0.1:{daemon.port}", tmp, "prompted",
                             "--model", "cross_prompt", "--rpc", "rerank", "--prompt-name",
                             "passage", "--requests", "10", "--duration", "0", "--warmup", "0")
            if r is not None:
                check(r["requests_ok"] == 10 and r["requests_error"] == 0,
                      f"loadtest --prompt-name passage: {r['requests_ok']} OK")
            r = run_loadtest(args.loadtest, f"127.0.0.1:{daemon.port}", tmp, "unknown_prompt",
                             "--model", "cross_prompt", "--prompt-name", "Passage",
                             "--requests", "10", "--duration", "0", "--warmup", "0",
                             expect_rc=1)
            if r is not None:
                check(r["requests_ok"] == 0 and
                      r["errors_by_code"] == {"INVALID_ARGUMENT": r["requests_error"]} and
                      r["requests_error"] >= 10,
                      f"loadtest --prompt-name Passage: refused: {r['errors_by_code']}")
    finally:
        daemon.stop()
    return report("pairs e2e", tmp / "server.log")


if __name__ == "__main__":
    sys.exit(main())
