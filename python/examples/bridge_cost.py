"""What the bridge costs a ResNet-50 training step (batch 64, synthetic data, SGD with
momentum), taken apart: PyTorch alone, PyTorch under an empty dispatch mode, unimem as the
allocator without declarations, and the whole bridge at a budget. One variant per process
(PyTorch takes one allocator per process); prints one JSON line: the median step, the host
time of each timed step up to its last enqueue, and unimem's counters.

    python3 python/examples/bridge_cost.py --variant bridge --budget 60% --policy advisor
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

VARIANTS = ("base", "mode", "allocator", "bridge")
STATS = ("gpu_faults", "h2d_bytes", "d2h_bytes", "evicted_bytes", "staged_out_bytes", "ops", "op_host_ns")
STATS += ("mode_host_ns", "mallocs", "malloc_host_ns", "runtime_host_ns", "policy_host_ns", "peak_footprint_bytes")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variant", choices=VARIANTS, default="bridge")
    p.add_argument("--budget", default="60%", help="unimem's budget: a percent of the GPU or bytes")
    p.add_argument("--policy", default="advisor", help="unimem's policy: advisor, oracle or none")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=4)
    args = p.parse_args()

    unimem = None
    if args.variant in ("allocator", "bridge"):
        import unimem_torch as unimem

        unimem.enable(budget=args.budget, policy=args.policy, declare=args.variant == "bridge")
    import torch
    import torchvision

    if args.variant == "mode":
        from torch.utils._python_dispatch import TorchDispatchMode

        class Empty(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return func(*args, **(kwargs or {}))

        Empty().__enter__()
    torch.manual_seed(0)
    model = torchvision.models.resnet50(num_classes=1000).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    images = torch.randn(64, 3, 224, 224, generator=g).cuda()
    labels = torch.randint(0, 1000, (64,), generator=g).cuda()
    loss_fn = torch.nn.CrossEntropyLoss()
    steps, host = [], []
    for i in range(args.warmup + args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = loss_fn(model(images), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if unimem is not None:
            unimem.step()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        if i >= args.warmup:
            steps.append((t2 - t0) * 1e3)
            host.append((t1 - t0) * 1e3)
    out = {
        "variant": args.variant,
        "budget": args.budget if unimem else None,
        "policy": args.policy if unimem else None,
        "median_step_ms": round(statistics.median(steps), 2),
        "step_ms": [round(t, 1) for t in steps],
        "host_ms": [round(t, 1) for t in host],
        "loss": loss.item(),
    }
    if unimem is not None:
        s = unimem.stats()
        out["unimem"] = {k: s[k] for k in STATS}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
