"""What both examples share: the modes, the command line, the timed training loop and the one
JSON line each mode prints."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MODES = ("base", "unimem", "checkpoint", "save_on_cpu")


def parse_args(default_batch, default_steps=8):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mode", choices=MODES + ("all",), default="all", help="all: each mode in a process of its own")
    p.add_argument(
        "--budget",
        default="0.5",
        help="unimem's budget: a fraction of the base mode's peak device bytes (0.5: half the memory the "
        "program needs), or what unimem_torch.enable takes ('8GiB', '50%%' of the GPU)",
    )
    p.add_argument("--policy", default="advisor", help="unimem's policy: advisor, oracle or none")
    p.add_argument("--steps", type=int, default=default_steps, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="steps before the timed ones")
    p.add_argument("--batch", type=int, default=default_batch)
    p.add_argument("--record", default=None, help="unimem mode: record the program's trace v1 here")
    p.add_argument("--base-peak", type=int, default=None, help="the base mode's peak device bytes (measured if not given)")
    p.add_argument(
        "--step-stats",
        action="store_true",
        help="unimem mode: the library's host time of each timed step too (stats() after each, outside the timing;"
        " it synchronises the device, which also frees the buffers the pool retired)",
    )
    return p.parse_args()


def run_all(args, script):
    """Runs every mode in its own process (PyTorch's allocator is chosen once per process):
    base first, whose peak sizes unimem's budget."""
    base = run_mode_process(script, args, "base")
    print(json.dumps(base), flush=True)
    for mode in MODES[1:]:
        out = run_mode_process(script, args, mode, base_peak=base["peak_device_bytes"])
        print(json.dumps(out), flush=True)


def run_mode_process(script, args, mode, base_peak=None):
    cmd = [sys.executable, script, "--mode", mode, "--budget", args.budget, "--policy", args.policy]
    cmd += ["--steps", str(args.steps), "--warmup", str(args.warmup), "--batch", str(args.batch)]
    if base_peak is not None:
        cmd += ["--base-peak", str(base_peak)]
    if args.record and mode == "unimem":
        cmd += ["--record", args.record]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, check=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def unimem_budget(args, script):
    """The budget unimem_torch.enable gets: a fraction of the base peak, or the text as given."""
    try:
        fraction = float(args.budget)
    except ValueError:
        return args.budget, None
    peak = args.base_peak
    if peak is None:
        peak = run_mode_process(script, args, "base")["peak_device_bytes"]
    return str(int(fraction * peak)), fraction


def setup(args, script):
    """Before anything touches CUDA: unimem becomes the allocator in its mode; the same seeds
    and deterministic kernels in every mode, so that base and unimem compute the same losses."""
    budget = None
    if args.mode == "unimem":
        budget, _ = unimem_budget(args, script)
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(script)), ".."))
        import unimem_torch

        unimem_torch.enable(budget=budget, policy=args.policy, record=args.record)
    import torch

    torch.manual_seed(0)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    return budget


def start(script, default_batch):
    """The mode to run, set up (None once `--mode all` has run every mode)."""
    args = parse_args(default_batch=default_batch)
    script = os.path.abspath(script)
    if args.mode == "all":
        run_all(args, script)
        return None
    setup(args, script)
    return args


def training_step(args, opt, loss_of):
    """One training step of `loss_of()` (the forward pass and its loss) in the mode's way:
    save_on_cpu saves the forward's activations to pinned host memory."""
    import torch

    def step(_):
        if args.mode == "save_on_cpu":
            with torch.autograd.graph.save_on_cpu(pin_memory=True):
                loss = loss_of()
        else:
            loss = loss_of()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def _per_step_ms(before, after, steps):
    """The library's host times (ns counters, the runtime's by kind of work and the engine
    thread's by kind of call) between two `stats()`, in ms per step."""
    out = {}
    # The library's counters per call are means over its calls so far: totals are mean x calls.
    for name, count in (("op", "ops"), ("malloc", "mallocs"), ("free", "frees")):
        total = after[f"{name}_host_ns"] * after[count] - before[f"{name}_host_ns"] * before[count]
        out[name] = round(total / 1e6 / steps, 2)
    out["policy"] = round((after["policy_host_ns"] - before["policy_host_ns"]) / 1e6 / steps, 2)
    for key, name in (("runtime_host_ns", "runtime"), ("runtime_move_host_ns", "moves"), ("engine_host_ns", "engine")):
        a, b = after[key], before[key]
        out[name] = {k: round((v - b[k]) / 1e6 / steps, 2) for k, v in a.items()}
    return out


def train(args, model_name, step_fn, extra=None):
    """Runs warmup + timed steps of `step_fn(i) -> loss tensor` (which also steps the
    optimizer) and prints this mode's JSON line."""
    import torch

    unimem = None
    if args.mode == "unimem":
        import unimem_torch as unimem
    times, losses = [], []
    warm = None  # the library's counters once the warm-up steps are done
    steps_host, prev = [], None  # with --step-stats: each timed step's host time
    for i in range(args.warmup + args.steps):
        if unimem is not None and i == args.warmup:
            warm = prev = unimem.stats()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step_fn(i)
        if unimem is not None:
            unimem.step()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        losses.append(loss.item())
        if i >= args.warmup:
            times.append((t1 - t0) * 1e3)
            if unimem is not None and args.step_stats:
                now = unimem.stats()
                one = _per_step_ms(prev, now, 1)
                one["new_buffers"] = now["new_buffers"] - prev["new_buffers"]
                one["staging_pinned_bytes"] = now["staging_pinned_bytes"]
                steps_host.append(one)
                prev = now
    out = {
        "model": model_name,
        "mode": args.mode,
        "batch": args.batch,
        "steps": args.steps,
        "median_step_ms": round(statistics.median(times), 2),
        "step_ms": [round(t, 2) for t in times],
        "final_loss": losses[-1],
        "losses": losses,
    }
    if unimem is not None:
        s = unimem.stats()
        out["peak_device_bytes"] = s["peak_footprint_bytes"]
        out["budget_bytes"] = s["budget_bytes"]
        keys = ("h2d_bytes", "d2h_bytes", "evicted_bytes", "staged_out_bytes", "gpu_faults", "ops", "op_host_ns", "mode_host_ns", "live_regions")
        keys += ("mallocs", "malloc_host_ns", "frees", "free_host_ns", "runtime_host_ns", "policy_host_ns")
        keys += ("staging_pinned_bytes",)
        out["unimem"] = {k: s[k] for k in keys}
        out["unimem"]["ops_per_step"] = s["ops"] / max(1, s["steps"])
        if warm is not None:
            # Host time per timed step, warm-up (pinning staging memory, first allocations) left out.
            out["unimem"]["timed_step_host_ms"] = _per_step_ms(warm, s, args.steps)
            out["unimem"]["new_buffers_per_step"] = (s["new_buffers"] - warm["new_buffers"]) / args.steps
        if steps_host:
            out["unimem"]["each_step_host_ms"] = steps_host
        if args.record:
            unimem.stop_recording()
            out["trace"] = args.record
    else:
        out["peak_device_bytes"] = torch.cuda.max_memory_allocated()
    if extra:
        out.update(extra)
    print(json.dumps(out), flush=True)
