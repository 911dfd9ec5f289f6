#!/usr/bin/env python3
"""Writes a synthetic trace v1 of a GPT-style decoder's decode loop, kernel per operator.

Each of LAYERS layers has four weight matrices (qkv 24 MiB, o 8 MiB, up 32 MiB, down 32 MiB),
each read by a kernel of its own, and a 6 MiB KV cache that its qkv kernel writes an eighth of
per pass and its attention kernel reads whole; the activations are one small region. A step
is PASSES passes; three steps. A kernel's time is its weights' MiB times US_PER_MIB.

Unlike the sample transformer trace (one fused kernel per layer), a pass here is 5 x LAYERS
kernels, longer than the advisor's forecast: the loop the policies see is not the one they
were tuned on.

Usage: scripts/gen-decode-trace.py OUT.jsonl.gz [LAYERS=16] [PASSES=8] [US_PER_MIB=4.5]
"""
import gzip
import json
import sys

MIB = 1 << 20


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out_path = sys.argv[1]
    layers = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    passes = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    us_per_mib = float(sys.argv[4]) if len(sys.argv) > 4 else 4.5
    with gzip.open(out_path, "wt") as out:
        def write(o):
            out.write(json.dumps(o) + "\n")

        write({"format": "unimem-trace", "version": 1, "device": "synthetic",
               "source": f"GPT-style decode, {layers} layers, kernel per operator, {passes} passes a step",
               "recorded_by": "scripts/gen-decode-trace.py"})
        next_id = 1
        weights = {}
        for layer in range(layers):
            for name, mib in [("qkv", 24), ("o", 8), ("up", 32), ("down", 32)]:
                weights[(layer, name)] = (next_id, mib * MIB)
                next_id += 1
        kv = {layer: (next_id + layer, 6 * MIB) for layer in range(layers)}
        act = (next_id + layers, 64 << 10)

        def kernel(name, acc, mib):
            write({"ev": "kernel", "name": name, "dur_ns": int(mib * us_per_mib * 1000), "acc": acc})

        for step in range(3):
            write({"ev": "step", "index": step})
            if step == 0:
                for rid, size in list(weights.values()) + list(kv.values()) + [act]:
                    write({"ev": "alloc", "id": rid, "bytes": size})
            for p in range(passes):
                for layer in range(layers):
                    a = [act[0], 0, act[1], "rw"]
                    k, kb = kv[layer]
                    q, qb = weights[(layer, "qkv")]
                    kernel("qkv", [[act[0], 0, act[1], "r"], [q, 0, qb, "r"], [k, (p % 8) * (kb // 8), kb // 8, "w"]], 24)
                    kernel("attn", [a, [k, 0, kb, "r"]], 6)
                    for name in ["o", "up", "down"]:
                        rid, size = weights[(layer, name)]
                        kernel(name, [a, [rid, 0, size, "r"]], size // MIB)


if __name__ == "__main__":
    main()
