#!/usr/bin/env python3
"""tests/device/summary.py: the summary of tests/device/run (printed, summary.txt) and
results.json, from the files the stages wrote:

  summary.py BENCH_TSV VERDICTS RESULTS_JSON WARMUP STEPS DRYRUN GPU TORCH_JSON
             GOSSIP_JSON ACCURACY_TSV LSTM_AUTO_TSV
"""
import json, sys

tsv, verdicts, res_path, warm, steps, dryrun, gpu, torch_json, gossip, acc, auto = sys.argv[1:12]
rates = {}
for line in open(tsv):
    impl, model, prec, rate = line.rstrip("\n").split("\t")
    rates[(impl, model, prec)] = None if rate == "-" else float(rate)
try:
    torch_backend = json.load(open(torch_json)).get("backend")
except (OSError, ValueError):
    torch_backend = None
try:
    gossip_res = json.load(open(gossip))
except (OSError, ValueError):
    gossip_res = None

print("shoal device checks%s" % (" (DRY RUN: cpu, batch 4 x bptt 5, shoal's bf16 rows ran "
                                 "fp32: not figures)" if dryrun == "1" else ""))
print("GPU: %s" % gpu)
if torch_backend:
    print("PyTorch side: %s" % torch_backend)
print()
for line in open(verdicts):
    print(line.rstrip("\n"))
print()
print("training tokens/s, %s warm-up steps then %s timed, one run at a time:" % (warm, steps))
rows = [["model", "precision", "shoal", "op by op", "PyTorch+cuDNN", "shoal/PyTorch"]]
table = []
for model in ("word", "lstmp-large"):
    for prec in ("fp32", "bf16"):
        s, t = rates.get(("shoal", model, prec)), rates.get(("torch", model, prec))
        o = rates.get(("shoal-opbyop", model, prec))
        ratio = s / t if s and t else None
        rows.append([model, prec, "%.0f" % s if s else "-", "%.0f" % o if o else "-",
                     "%.0f" % t if t else "-", "%.2fx" % ratio if ratio else "-"])
        table.append({"model": model, "precision": prec, "shoal_tokens_per_s": s,
                      "shoal_op_by_op_tokens_per_s": o, "torch_tokens_per_s": t,
                      "ratio": ratio})
widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
for k, r in enumerate(rows):
    print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in
                    enumerate(zip(r, widths))))
    if k == 0:
        print("  ".join("-" * w for w in widths))
print("shoal records its recurrent loops as CUDA graphs; 'op by op' is SHOAL_CUDA_GRAPHS=0")
print("'shoal' runs device_options.lstm auto (cudnn or fused: below), 'op by op' fused")
print("targets: shoal/PyTorch >= 1.5 for lstmp-large in fp32 and bf16, > 1 for word")
lstm = []
choices = {}
for line in open(auto):
    model, prec, text = line.rstrip("\n").split("\t", 2)
    choices[(model, prec)] = text
if any(k[0] in ("shoal-cudnn", "shoal-fused") for k in rates) or choices:
    print()
    print("device_options.lstm, tokens/s as above (graphs on), and auto's start-up timing:")
    for model in ("word", "lstmp-large"):
        c, u = rates.get(("shoal-cudnn", model, "fp32")), rates.get(("shoal-fused", model, "fp32"))
        print("  %-12s fp32  cudnn %8s  fused %8s  cudnn/fused %6s" %
              (model, "%.0f" % c if c else "-", "%.0f" % u if u else "-",
               "%.2fx" % (c / u) if c and u else "-"))
        lstm.append({"model": model, "precision": "fp32", "cudnn_tokens_per_s": c,
                     "fused_tokens_per_s": u})
    for (model, prec), text in sorted(choices.items()):
        print("  %-12s %-5s %s" % (model, prec, text))
with open(res_path, "w") as f:
    json.dump({"gpu": gpu, "torch_backend": torch_backend, "dry_run": dryrun == "1",
               "warmup_steps": int(warm), "timed_steps": int(steps), "tokens_per_s": table,
               "lstm_paths": lstm,
               "lstm_auto": [{"model": m, "precision": p, "log": t}
                             for (m, p), t in sorted(choices.items())],
               "gossip": gossip_res,
               "accuracy": [dict(zip(("seed", "shoal_valid_ppl", "torch_valid_ppl"),
                                     (int(a), None if b == "-" else float(b),
                                      None if c == "-" else float(c))))
                            for a, b, c in (l.split() for l in open(acc))],
               "verdicts": [l.rstrip("\n") for l in open(verdicts)]}, f, indent=1)
