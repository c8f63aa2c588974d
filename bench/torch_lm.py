#!/usr/bin/env python3
"""PyTorch side of shoal's training benchmark: the reference LSTM language models
built, tokenised and trained the way shoal does it, reporting one JSON object with
the keys of shoal's summary.json (tokens_per_s, valid_ppl, peak_rss_kb, backend, ...).

Mirrors shoal (src/data/sl_data.h, src/model/sl_model.h):
  * word level: tokens are runs of non-whitespace bytes, every line ends with <eos>;
    vocabulary = top V training words by count (ties: byte order) + <unk> + <eos>,
    ids by descending training count (ties: byte order), <unk> counted as the
    out-of-vocabulary tokens and <eos> as the lines, so id ~ Zipf rank;
  * char level: tokens are code points (newline included), vocabulary = every
    training character + <unk>, same order; tinyshakespeare: first 90% train, last
    10% valid;
  * B streams: a token array of length N is cut into B contiguous streams of
    L = N // B tokens; batch i holds stream_b[i*T : i*T+T] and targets one token
    later; (L - 1) // T batches per epoch, the remainder dropped (shoal's batcher;
    PyTorch's word_language_model keeps a last short batch instead);
  * nn.Embedding -> nn.LSTM (no dropout; proj_size for LSTMP) -> Linear decoder; ONE
    bias per LSTM layer
    (b_hh is zero and frozen, b_ih is the bias), every weight uniform(-r, r), biases
    zero; hidden state carried (detached) across the batches of an epoch, zeroed at
    its start; loss = mean cross-entropy over T*B tokens; clipping of the global
    gradient norm as clip_grad_norm_, the norm summed accurately (see clip_grad_norm);
  * sampled softmax as TensorFlow's sampled_softmax_loss with
    log_uniform_candidate_sampler(unique=True) and remove_accidental_hits=True:
    S unique negatives per step shared by all T*B tokens, P(k) = log((k+2)/(k+1)) /
    log(V+1), logit -= log(expected count) with expected count
    -expm1(tries * log1p(-P(k))), negatives equal to the row's target masked out;
  * evaluation: full softmax, batch 10, same T, state zeroed at the start.

Device and precision: --device cuda[:N] runs on a GPU (nn.LSTM is cuDNN's there);
--precision bf16 wraps forward and loss in torch.autocast(dtype=bfloat16) (no loss
scaling: bf16 has fp32's range). fp32 is strict fp32 on the GPU: TF32 is switched off for
matmuls and cuDNN, as shoal's fp32 gemm does not use it. Times are taken after
torch.cuda.synchronize().

Threads: OMP_NUM_THREADS / OPENBLAS_NUM_THREADS are set to --threads before torch is
imported (and OMP_WAIT_POLICY to PASSIVE unless set), then torch.set_num_threads. Run it with
LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread so that Debian's torch
(linked against the generic libblas.so.3) gets OpenBLAS; the BLAS actually mapped is
read from /proc/self/maps and reported (--require-openblas makes anything else an
error).
"""

import argparse
import json
import math
import os
import re
import resource
import sys
import time

PRESETS = {
    # name: level, corpus files, V, E, layers of H (projected to proj when > 0), B, T,
    # optimizer, lr, clip, output
    "word": dict(level="word", vocab=10000, embedding=256, hidden=256, proj=0, layers=2,
                 batch=32, bptt=35, optimizer="sgd", lr=20.0, clip=0.25,
                 output="full", samples=1024),
    "sampled": dict(level="word", vocab=10000, embedding=256, hidden=256, proj=0, layers=2,
                    batch=32, bptt=35, optimizer="sgd", lr=20.0, clip=0.25,
                    output="sampled", samples=1024),
    "char": dict(level="char", vocab=0, embedding=64, hidden=512, proj=0, layers=1,
                 batch=32, bptt=100, optimizer="adam", lr=2e-3, clip=5.0,
                 output="full", samples=0),
    # conf/brown-lstmp-large.yaml: one LSTMP layer 2048/512, B 64 (the GPU benchmark)
    "lstmp-large": dict(level="word", vocab=10000, embedding=512, hidden=2048, proj=512,
                        layers=1, batch=64, bptt=35, optimizer="sgd", lr=20.0, clip=0.25,
                        output="full", samples=1024),
}

EVAL_BATCH = 10
WARMUP_STEPS = 3
LOSS_WINDOW = 20  # final_train_loss: mean over the last steps (shoal's log_every)


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Train a reference LSTM LM with PyTorch the way shoal does; "
                    "print one JSON summary.")
    p.add_argument("--model", choices=sorted(PRESETS), required=True,
                   help="reference model: word (Brown, full softmax), sampled (Brown, "
                        "sampled softmax), char (tinyshakespeare), lstmp-large (Brown, "
                        "LSTMP 2048/512, B 64, full softmax)")
    p.add_argument("--device", default="cpu",
                   help="cpu (default), cuda or cuda:N")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="fp32 (default) or bf16 autocast")
    p.add_argument("--warmup", type=int, default=WARMUP_STEPS,
                   help="steps left out of tokens_per_s (default %d)" % WARMUP_STEPS)
    p.add_argument("--data", default=None,
                   help="corpus root holding brown/ and tinyshakespeare/ "
                        "(default $SHOAL_DATA or <repo>/../shared/data)")
    p.add_argument("--threads", type=int, default=1, help="compute threads (default 1)")
    p.add_argument("--steps", type=int, default=0,
                   help="stop after this many training steps (0: --epochs decides)")
    p.add_argument("--epochs", type=int, default=1, help="epochs when --steps is 0")
    p.add_argument("--batch", type=int, default=None, help="override B")
    p.add_argument("--bptt", type=int, default=None, help="override T")
    p.add_argument("--samples", type=int, default=None, help="override S (sampled)")
    p.add_argument("--vocab", type=int, default=None,
                   help="override V at word level: the N most frequent training words")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--init-range", type=float, default=0.1)
    p.add_argument("--no-eval", action="store_true",
                   help="skip the validation pass (throughput runs)")
    p.add_argument("--eval-every", type=int, default=0,
                   help="also evaluate on valid every N steps (not timed): valid_curve")
    p.add_argument("--test", action="store_true", help="also evaluate on test")
    p.add_argument("--require-openblas", action="store_true",
                   help="fail unless libopenblas is mapped into the process")
    p.add_argument("--out", default=None, help="write the JSON here too")
    p.add_argument("--log-every", type=int, default=0,
                   help="print step/loss/tok/s to stderr every N steps (0: never)")
    a = p.parse_args(argv)
    if a.threads < 1:
        p.error("--threads must be >= 1")
    if a.steps < 0 or a.epochs < 1 or a.eval_every < 0 or a.warmup < 0:
        p.error("--steps, --warmup and --eval-every must be >= 0 and --epochs >= 1")
    if a.vocab is not None and (a.vocab < 1 or PRESETS[a.model]["level"] != "word"):
        p.error("--vocab wants a positive count and a word-level --model")
    if not re.fullmatch(r"cpu|cuda(:[0-9]+)?", a.device):
        p.error("--device must be cpu, cuda or cuda:N, not %r" % a.device)
    return a


# ----------------------------------------------------------------------------- data

def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def word_tokens(data):
    """Words of each line, then <eos>; a final line without newline still counts."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for line in lines:
        out.extend(line.split())
        out.append(None)  # <eos>
    return out


def build_word_vocab(train, size):
    counts = {}
    lines = 0
    for w in train:
        if w is None:
            lines += 1
        else:
            counts[w] = counts.get(w, 0) + 1
    if size > len(counts):
        raise SystemExit("torch_lm: vocab_size %d larger than the %d distinct training "
                         "words" % (size, len(counts)))
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    kept = ranked[:size]
    oov = sum(c for _, c in ranked[size:])
    entries = kept + [(b"<unk>", oov), (b"<eos>", lines)]
    entries.sort(key=lambda kv: (-kv[1], kv[0]))
    words = [w for w, _ in entries]
    return {w: i for i, w in enumerate(words)}, words


def encode_words(tokens, ids):
    unk, eos = ids[b"<unk>"], ids[b"<eos>"]
    return [eos if w is None else ids.get(w, unk) for w in tokens]


def load_word(root, vocab_size):
    d = os.path.join(root, "brown")
    tr = word_tokens(read_bytes(os.path.join(d, "train.txt")))
    ids, words = build_word_vocab(tr, vocab_size)
    splits = {"train": encode_words(tr, ids)}
    for name in ("valid", "test"):
        splits[name] = encode_words(word_tokens(read_bytes(os.path.join(d, name + ".txt"))),
                                    ids)
    return splits, len(words)


def load_char(root, valid_fraction=0.1):
    path = os.path.join(root, "tinyshakespeare", "input.txt")
    try:
        text = read_bytes(path).decode("utf-8")
    except UnicodeDecodeError as e:
        raise SystemExit("%s: invalid UTF-8 at byte %d" % (path, e.start))
    cut = len(text) - int(len(text) * valid_fraction)
    train, valid = text[:cut], text[cut:]
    counts = {}
    for ch in train:
        counts[ch] = counts.get(ch, 0) + 1
    entries = [(ch.encode("utf-8"), c) for ch, c in counts.items()] + [(b"<unk>", 0)]
    entries.sort(key=lambda kv: (-kv[1], kv[0]))
    ids = {w: i for i, (w, _) in enumerate(entries)}
    unk = ids[b"<unk>"]

    def enc(s):
        return [ids.get(ch.encode("utf-8"), unk) for ch in s]

    return {"train": enc(train), "valid": enc(valid), "test": []}, len(entries)


class Batcher:
    """B contiguous streams of L = N // B tokens, (L - 1) // T batches, time-major."""

    def __init__(self, torch, tokens, batch, bptt, device):
        n = len(tokens)
        self.stream_len = n // batch
        self.batches = (self.stream_len - 1) // bptt if self.stream_len > 0 else 0
        if self.batches < 1:
            raise SystemExit("torch_lm: %d tokens do not fit batch %d x bptt %d"
                             % (n, batch, bptt))
        t = torch.tensor(tokens[:self.stream_len * batch], dtype=torch.long)
        self.data = t.view(batch, self.stream_len).t().contiguous().to(device)  # (L, B)
        self.bptt = bptt

    def get(self, i):
        s = i * self.bptt
        return self.data[s:s + self.bptt], self.data[s + 1:s + 1 + self.bptt]


# ---------------------------------------------------------------------------- model

def out_size(cfg):
    """R: what each LSTM layer outputs (P with a projection, else H)."""
    return cfg["proj"] or cfg["hidden"]


def make_model(torch, vocab, cfg, init_range):
    nn = torch.nn

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, cfg["embedding"])
            self.lstm = nn.LSTM(cfg["embedding"], cfg["hidden"], cfg["layers"],
                                proj_size=cfg["proj"])
            self.decoder = nn.Linear(out_size(cfg), vocab)

        def forward(self, x, state):
            out, state = self.lstm(self.embed(x), state)
            return out, state

    m = LM()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "bias" in name:
                p.zero_()
            else:
                p.uniform_(-init_range, init_range)
    # shoal has one bias per LSTM layer: keep b_hh at zero, out of training and clipping
    for name, p in m.lstm.named_parameters():
        if name.startswith("bias_hh"):
            p.requires_grad_(False)
    return m


class LogUniformSampler:
    """TF's log_uniform_candidate_sampler(unique=True) over ids 0..V-1 (id = rank)."""

    def __init__(self, np, vocab, samples, seed):
        self.np = np
        self.vocab, self.samples = vocab, samples
        self.log_range = math.log(vocab + 1)
        k = np.arange(vocab, dtype=np.float64)
        self.prob = np.log((k + 2.0) / (k + 1.0)) / self.log_range
        self.log1m_prob = np.log1p(-self.prob)
        self.rng = np.random.default_rng(seed)

    def draw(self):
        np = self.np
        seen = np.zeros(self.vocab, dtype=bool)
        picked = []
        tries = 0
        chunk = 2 * self.samples
        while len(picked) < self.samples:
            u = self.rng.random(chunk)
            ids = np.minimum((np.exp(u * self.log_range) - 1.0).astype(np.int64),
                             self.vocab - 1)
            for j, v in enumerate(ids.tolist()):
                if not seen[v]:
                    seen[v] = True
                    picked.append(v)
                    if len(picked) == self.samples:
                        tries += j + 1
                        break
            else:
                tries += chunk
        return np.array(picked, dtype=np.int64), tries

    def log_expected(self, ids, tries):
        """log of -expm1(tries * log1p(-P(id))) for an int64 numpy index array."""
        np = self.np
        return np.log(-np.expm1(tries * self.log1m_prob[ids]))


def sampled_loss(torch, F, h, y, decoder, sampler):
    """Mean sampled-softmax cross-entropy of h (N, H) against targets y (N)."""
    np = sampler.np
    dev = h.device
    s_np, tries = sampler.draw()
    y_np = y.cpu().numpy()
    s = torch.from_numpy(s_np).to(dev)
    logq_s = torch.from_numpy(sampler.log_expected(s_np, tries).astype(np.float32)).to(dev)
    logq_y = torch.from_numpy(sampler.log_expected(y_np, tries).astype(np.float32)).to(dev)
    w, b = decoder.weight, decoder.bias
    true_logit = (h * F.embedding(y, w)).sum(1) + b[y] - logq_y      # (N)
    samp_logit = torch.addmm(b[s] - logq_s, h, F.embedding(s, w).t())  # (N, S)
    hits = y.unsqueeze(1) == s.unsqueeze(0)
    samp_logit = samp_logit.masked_fill(hits, torch.finfo(torch.float32).min)
    logits = torch.cat([true_logit.unsqueeze(1), samp_logit], 1)    # (N, 1+S)
    return F.cross_entropy(logits, torch.zeros(len(y), dtype=torch.long, device=dev))


# ---------------------------------------------------------------------------- train

def zero_state(torch, cfg, batch, device):
    h = torch.zeros(cfg["layers"], batch, out_size(cfg), device=device)
    c = torch.zeros(cfg["layers"], batch, cfg["hidden"], device=device)
    return (h, c)


def sumsq(torch, g, chunk=1024):
    """Sum of squares of g as a float64 scalar tensor: fp32 norms of rows of `chunk`
    elements, their squares summed in float64. torch 1.13's fp32 norm of a large CPU
    tensor is off by up to ~2e-3 (0.17103 instead of 0.17119 for the 2.56M-element
    decoder gradient of the word model; torch.dot 3e-4); this is within ~1e-7 and costs
    about what torch.norm does (a float64 copy of the gradients would cost 20x)."""
    f = g.detach().reshape(-1)
    n = f.numel() // chunk * chunk
    s = torch.linalg.vector_norm(f[:n].view(-1, chunk), dim=1).double().pow(2).sum()
    if n < f.numel():
        s = s + f[n:].double().pow(2).sum()
    return s


def clip_grad_norm(torch, params, clip):
    """clip_grad_norm_ as shoal's sl_clip_global_norm computes it: the global norm from
    sumsq (accurate), coefficient clip / (norm + 1e-6) applied when below 1. With
    clip_grad_norm_'s fp32 norm the two sides' parameters parted by ~4e-4 within 5
    steps from identical starts; with this, by ~1.5e-7 (2.5e-5 after 20 steps, at the
    softmax bias of magnitude ~5). Returns the norm."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    norm = float(torch.stack([sumsq(torch, g) for g in grads]).sum().sqrt())
    coef = clip / (norm + 1e-6)
    if coef < 1.0:
        for g in grads:
            g.detach().mul_(coef)
    return norm


def evaluate(torch, F, model, cfg, tokens, bptt, device, autocast):
    if not tokens:
        return None
    bt = Batcher(torch, tokens, EVAL_BATCH, bptt, device)
    model.eval()
    total, count = 0.0, 0
    state = zero_state(torch, cfg, EVAL_BATCH, device)
    with torch.no_grad():
        for i in range(bt.batches):
            x, y = bt.get(i)
            with autocast():
                out, state = model(x, state)
                logits = model.decoder(out.reshape(-1, out_size(cfg)))
            total += F.cross_entropy(logits, y.reshape(-1), reduction="sum").item()
            count += y.numel()
    model.train()
    loss = total / count
    return {"loss": loss, "ppl": math.exp(loss), "bpc": loss / math.log(2)}


def mapped_libs():
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and ".so" in parts[-1]:
                    libs.add(parts[-1])
    except OSError:
        pass
    return sorted(libs)


def blas_report(torch):
    """The BLAS really loaded: mapped .so paths, OpenBLAS's own config string."""
    import ctypes
    libs = [p for p in mapped_libs()
            if any(k in os.path.basename(p) for k in ("blas", "lapack", "mkl"))]
    openblas = [p for p in libs if "openblas" in os.path.basename(p)]
    desc = None
    for path in openblas:
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_config.restype = ctypes.c_char_p
            desc = lib.openblas_get_config().decode()
            lib.openblas_get_num_threads.restype = ctypes.c_int
            desc += " threads=%d" % lib.openblas_get_num_threads()
            lib.openblas_get_corename.restype = ctypes.c_char_p
            desc += " core=%s" % lib.openblas_get_corename().decode()
            break
        except (OSError, AttributeError):
            continue
    if desc is None:
        desc = "reference/other BLAS: " + (", ".join(libs) if libs else "none mapped")
    config = torch.__config__.show()
    info = re.findall(r"\b(?:BLAS|LAPACK)_INFO=[^,\s]*", config)
    # ATen's own kernels (not the BLAS): the instruction set its dispatch picked
    cap = re.search(r"CPU capability usage: *(\S+)", config)
    if cap:
        info.append("CPU_CAPABILITY=" + cap.group(1))
    return desc, libs, bool(openblas), info


def device_report(torch, device):
    """cuDNN, CUDA and the GPU's name, for the backend field on a GPU."""
    return "cuDNN %s, CUDA %s, %s" % (torch.backends.cudnn.version(), torch.version.cuda,
                                      torch.cuda.get_device_name(device))


def main(argv):
    a = parse_args(argv)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(a.threads)
    # GOMP's workers spin after each parallel region and starve OpenBLAS's pthreads:
    # at 2 threads on 2 cores that made PyTorch run at ~40% of its 1-thread speed.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import numpy as np
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print("torch_lm: PyTorch not importable (%s): apt-get install python3-torch" % e,
              file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    device = torch.device(a.device)
    on_gpu = device.type == "cuda"
    if on_gpu:
        if not torch.cuda.is_available():
            print("torch_lm: --device %s, but PyTorch sees no GPU" % a.device, file=sys.stderr)
            return 2
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def autocast():
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                              enabled=a.precision == "bf16")

    def synchronize():
        if on_gpu:
            torch.cuda.synchronize(device)

    backend, blas_libs, is_openblas, torch_blas = blas_report(torch)
    if on_gpu:
        backend = device_report(torch, device)
    if a.require_openblas and not is_openblas:
        print("torch_lm: libopenblas is not loaded (%s); put "
              "/usr/lib/x86_64-linux-gnu/openblas-pthread first in LD_LIBRARY_PATH"
              % backend, file=sys.stderr)
        return 3

    cfg = dict(PRESETS[a.model])
    for key in ("batch", "bptt", "samples", "vocab"):
        if getattr(a, key) is not None:
            cfg[key] = getattr(a, key)
    root = a.data or os.environ.get("SHOAL_DATA") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data")
    t0 = time.perf_counter()
    if cfg["level"] == "word":
        splits, vocab = load_word(root, cfg["vocab"])
    else:
        splits, vocab = load_char(root)
    load_s = time.perf_counter() - t0

    model = make_model(torch, vocab, cfg, a.init_range).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    nparams = sum(p.numel() for p in params)
    if cfg["optimizer"] == "sgd":
        opt = torch.optim.SGD(params, lr=cfg["lr"])
    else:
        opt = torch.optim.Adam(params, lr=cfg["lr"], betas=(0.9, 0.999), eps=1e-8)
    sampler = None
    if cfg["output"] == "sampled":
        sampler = LogUniformSampler(np, vocab, cfg["samples"], a.seed)

    B, T = cfg["batch"], cfg["bptt"]
    R = out_size(cfg)
    bt = Batcher(torch, splits["train"], B, T, device)
    total = a.steps if a.steps > 0 else a.epochs * bt.batches
    losses, norms = [], []  # per step; norms: before clipping
    curve = []
    timed_s, timed_steps, train_s = 0.0, 0, 0.0
    state = None
    step, epoch = 0, 0
    while step < total:
        i = step % bt.batches
        if i == 0:
            state = zero_state(torch, cfg, B, device)
            if step > 0:
                epoch += 1
        x, y = bt.get(i)
        synchronize()
        t_start = time.perf_counter()
        state = tuple(s.detach() for s in state)
        with autocast():
            out, state = model(x, state)
            h = out.reshape(-1, R)
            if sampler is None:
                loss = F.cross_entropy(model.decoder(h), y.reshape(-1))
            else:
                loss = sampled_loss(torch, F, h, y.reshape(-1), model.decoder, sampler)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg["clip"] > 0:
            norms.append(clip_grad_norm(torch, params, cfg["clip"]))
        opt.step()
        lv = loss.item()
        synchronize()
        dt = time.perf_counter() - t_start
        train_s += dt
        if step >= a.warmup:
            timed_s += dt
            timed_steps += 1
        losses.append(lv)
        step += 1
        if not math.isfinite(lv):
            print("torch_lm: loss is %r at step %d" % (lv, step), file=sys.stderr)
            return 1
        if a.eval_every and step % a.eval_every == 0:
            ev = evaluate(torch, F, model, cfg, splits["valid"], T, device, autocast)
            curve.append([step, ev["ppl"]])
            print("step %d: valid ppl %.2f" % (step, ev["ppl"]), file=sys.stderr, flush=True)
        if a.log_every and step % a.log_every == 0:
            rate = timed_steps * B * T / timed_s if timed_s > 0 else 0.0
            window = losses[-a.log_every:]
            gn = norms[-a.log_every:]
            print("step %d/%d loss %.4f grad_norm %.4f (means of the last %d) tok/s %.0f"
                  % (step, total, sum(window) / len(window),
                     sum(gn) / len(gn) if gn else float("nan"), len(window), rate),
                  file=sys.stderr, flush=True)

    if timed_steps == 0:  # fewer steps than the warm-up: time them all
        timed_s, timed_steps = train_s, step
    res = {
        "impl": "pytorch",
        "model": a.model,
        "level": cfg["level"],
        "steps": step,
        "epochs": epoch + 1,
        "train_tokens": step * B * T,
        "train_time_s": train_s,
        "warmup_steps": step - timed_steps,
        "timed_steps": timed_steps,
        "timed_time_s": timed_s,
        "tokens_per_s": timed_steps * B * T / timed_s,
        "final_train_loss": sum(losses[-LOSS_WINDOW:]) / len(losses[-LOSS_WINDOW:]),
        "threads": a.threads,
        "torch_threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ["OMP_WAIT_POLICY"],
        "device": a.device,
        "precision": a.precision,
        "params": nparams,
        "vocab": vocab,
        "batches_per_epoch": bt.batches,
        "load_time_s": load_s,
        "backend": backend,
        "blas_libs": blas_libs,
        "openblas": is_openblas,
        "torch_blas_info": torch_blas,
        "torch_version": torch.__version__,
    }
    if curve:
        res["valid_curve"] = curve
    if not a.no_eval:
        ev = evaluate(torch, F, model, cfg, splits["valid"], T, device, autocast)
        res.update(valid_loss=ev["loss"], valid_ppl=ev["ppl"], valid_bpc=ev["bpc"])
        if a.test and splits["test"]:
            ev = evaluate(torch, F, model, cfg, splits["test"], T, device, autocast)
            res.update(test_loss=ev["loss"], test_ppl=ev["ppl"], test_bpc=ev["bpc"])
    res["peak_rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if on_gpu:
        res["peak_gpu_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
    text = json.dumps(res, indent=1, sort_keys=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
