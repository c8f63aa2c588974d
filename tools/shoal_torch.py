#!/usr/bin/env python3
"""Load a model that `shoal export` wrote into PyTorch and score a text file with it.

Usage: python3 tools/shoal_torch.py MODEL.safetensors TEXT [--json MODEL.json]

Prints the perplexity (word level) or bits per character (char level) of TEXT as
`shoal eval` computes it, e.g. "ppl 54.4467 (loss 3.997221934, 60160 tokens)", which
matches shoal's own figure to within 1e-4 relative.

The model is nn.Embedding -> one nn.LSTM per layer (proj_size for LSTMP layers) ->
nn.Linear, with the tensor names of doc/export.md, so that load_state_dict takes the
file as it is. Tokens are made as shoal makes them (src/data/sl_data.h): word level,
runs of characters other than space, tab, CR and newline, and <eos> at the end of every
line (also a last line without a newline); character level, every Unicode character;
anything not in the vocabulary is <unk>. The evaluation is shoal's: the ids cut into
`streams` contiguous streams, `bptt` steps at a time with the hidden state carried
along, the remainder dropped, the mean cross-entropy over the tokens scored.
Needs only torch; the safetensors header is read here (8-byte little-endian length,
JSON, raw little-endian data)."""

import argparse
import json
import math
import re
import struct
import sys

import torch
from torch import nn

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "F64": torch.float64}


def load_safetensors(path):
    """The tensors of a safetensors file, as float32, by name."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    body = data[8 + n:]
    tensors = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        x = torch.frombuffer(bytearray(body[begin:end]), dtype=DTYPES[t["dtype"]])
        tensors[name] = x.reshape(t["shape"]).float()
    return tensors


class ShoalLM(nn.Module):
    """Embedding, LSTM(P) layers, output layer: shoal's model (src/model/sl_model.h)."""

    def __init__(self, model):
        super().__init__()
        vocab, inp = model["vocab"], model["embedding"]
        self.encoder = nn.Embedding(vocab, inp)
        rnns = []
        for layer in model["layers"]:
            hidden, proj = layer["lstm"], layer["projection"]
            rnns.append(nn.LSTM(inp, hidden, proj_size=proj))  # time-major
            inp = proj or hidden
        self.rnns = nn.ModuleList(rnns)
        self.decoder = nn.Linear(inp, vocab)

    def forward(self, x, state):
        h = self.encoder(x)
        new = []
        for rnn, s in zip(self.rnns, state):
            h, s = rnn(h, s)
            new.append(s)
        return self.decoder(h), new


def tokenize(text, data, ids):
    unk = data["unk_id"]
    if data["level"] == "char":
        return [ids.get(c, unk) for c in text]
    out = []
    lines = text.split("\n")
    for i, line in enumerate(lines):
        out.extend(ids.get(w, unk) for w in re.split("[ \t\r]+", line) if w)
        if i < len(lines) - 1:
            out.append(data["eos_id"])
    if text and not text.endswith("\n"):
        out.append(data["eos_id"])
    return out


def evaluate(model, tokens, streams, bptt):
    """Mean loss (nats per token) and tokens scored, batched as shoal's sl_batcher_t."""
    length = len(tokens) // streams
    batches = (length - 1) // bptt
    if batches < 1:
        sys.exit(f"shoal_torch: {len(tokens)} tokens do not fit {streams} streams of "
                 f"{bptt + 1}")
    src = torch.tensor(tokens[:streams * length]).view(streams, length).t()  # (L, B)
    state = [None] * len(model.rnns)
    total = 0.0
    with torch.no_grad():
        for i in range(batches):
            x = src[i * bptt:(i + 1) * bptt]
            y = src[i * bptt + 1:(i + 1) * bptt + 1]
            logits, state = model(x, state)
            loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                               y.reshape(-1), reduction="sum")
            total += float(loss)
    n = batches * bptt * streams
    return total / n, n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("weights", help="MODEL.safetensors from shoal export")
    ap.add_argument("text", help="the text file to score")
    ap.add_argument("--json", help="the export's JSON file (default: beside the weights)")
    args = ap.parse_args()
    meta = args.json or re.sub(r"(\.safetensors)?$", ".json", args.weights, count=1)
    with open(meta, encoding="utf-8") as f:
        cfg = json.load(f)

    model = ShoalLM(cfg["model"])
    model.load_state_dict(load_safetensors(args.weights))
    model.eval()
    ids = {w: i for i, w in enumerate(cfg["vocab"])}
    with open(args.text, "rb") as f:  # no newline translation: shoal reads bytes
        text = f.read().decode("utf-8")
    loss, n = evaluate(model, tokenize(text, cfg["data"], ids), cfg["eval"]["streams"],
                       cfg["eval"]["bptt"])
    if cfg["data"]["level"] == "char":
        print(f"bpc {loss / math.log(2):.4f} (loss {loss:.9f}, {n} tokens)")
    else:
        print(f"ppl {math.exp(loss):.4f} (loss {loss:.9f}, {n} tokens)")


if __name__ == "__main__":
    main()
