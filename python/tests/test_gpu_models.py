"""On a GPU with PyTorch (skipped elsewhere): programs of other shapes than the examples' train
at half their memory under unimem with the losses of PyTorch alone, step for step, and within
the budget. Each family exercises operators the examples do not: attention through
`scaled_dot_product_attention` (a small vision transformer), 3D convolutions and transposed
convolutions with group norm (a small 3D U-Net), cuDNN's LSTM with its flattened weights and
reserve buffer, and embedding bags with fused AdamW, whose one optimizer operator touches more
than the budget (the bridge runs it in slices). Every run is a process of its own (PyTorch
chooses its allocator once per process) with deterministic algorithms, so that both modes
compute the same numbers.

    python3 -m unittest python/tests/test_gpu_models.py -v
"""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _gpu import HAVE_GPU, run_program  # noqa: E402

# One training run of the family named by argv[1]; prints one JSON line.
PROGRAM = r"""
import json, sys
sys.path.insert(0, %(root)r)
family, mode, budget, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
record = sys.argv[5] if len(sys.argv) > 5 else None
if mode == "unimem":
    import unimem_torch
    unimem_torch.enable(budget=budget, record=record)
import torch
import torch.nn as nn
import torch.nn.functional as F
torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
g = torch.Generator().manual_seed(1)

if family == "vit":
    import torchvision
    model = torchvision.models.VisionTransformer(
        image_size=128, patch_size=8, num_layers=6, num_heads=8, hidden_dim=384, mlp_dim=1536,
        num_classes=100)
    x = torch.randn(64, 3, 128, 128, generator=g)
    y = torch.randint(0, 100, (64,), generator=g)
    loss_of = lambda m, x, y: F.cross_entropy(m(x), y)
    opt_of = lambda p: torch.optim.AdamW(p, lr=1e-4)
elif family == "unet3d":
    def block(i, o):
        return nn.Sequential(nn.Conv3d(i, o, 3, padding=1), nn.GroupNorm(8, o), nn.SiLU(),
                             nn.Conv3d(o, o, 3, padding=1), nn.GroupNorm(8, o), nn.SiLU())
    class UNet3d(nn.Module):
        def __init__(self):
            super().__init__()
            self.down1, self.down2 = block(1, 32), block(32, 64)
            # Strided convolutions halve the volume (max_pool3d's backward is not deterministic).
            self.pool1, self.pool2 = nn.Conv3d(32, 32, 2, stride=2), nn.Conv3d(64, 64, 2, stride=2)
            self.mid = block(64, 128)
            self.up2, self.dec2 = nn.ConvTranspose3d(128, 64, 2, stride=2), block(128, 64)
            self.up1, self.dec1 = nn.ConvTranspose3d(64, 32, 2, stride=2), block(64, 32)
            self.out = nn.Conv3d(32, 1, 1)
        def forward(self, x):
            a = self.down1(x)
            b = self.down2(self.pool1(a))
            c = self.mid(self.pool2(b))
            b = self.dec2(torch.cat([self.up2(c), b], 1))
            a = self.dec1(torch.cat([self.up1(b), a], 1))
            return self.out(a)
    model = UNet3d()
    x = torch.randn(4, 1, 64, 64, 64, generator=g)
    y = torch.randn(4, 1, 64, 64, 64, generator=g)
    loss_of = lambda m, x, y: F.mse_loss(m(x), y)
    opt_of = lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9)
elif family == "lstm":
    class Lm(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(8192, 512)
            self.rnn = nn.LSTM(512, 1024, num_layers=2, batch_first=True)
            self.head = nn.Linear(1024, 8192)
        def forward(self, t):
            return self.head(self.rnn(self.emb(t))[0])
    model = Lm()
    x = torch.randint(0, 8192, (32, 256), generator=g)
    y = torch.randint(0, 8192, (32, 256), generator=g)
    loss_of = lambda m, x, y: F.cross_entropy(m(x).flatten(0, 1), y.flatten())
    opt_of = lambda p: torch.optim.Adam(p, lr=1e-3)
elif family == "embedding_bag":
    class Rec(nn.Module):
        def __init__(self):
            super().__init__()
            self.bags = nn.ModuleList(nn.EmbeddingBag(200_000, 64, mode="sum") for _ in range(4))
            self.mlp = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 1))
        def forward(self, idx, offsets):
            return self.mlp(torch.cat([b(idx[i], offsets) for i, b in enumerate(self.bags)], 1))
    model = Rec()
    x = torch.randint(0, 200_000, (4, 4096 * 20), generator=g)
    y = torch.rand(4096, 1, generator=g)
    offsets = torch.arange(0, 4096 * 20, 20)
    loss_of = lambda m, x, y: F.binary_cross_entropy_with_logits(m(x, offsets.cuda()), y)
    opt_of = lambda p: torch.optim.AdamW(p, lr=1e-3, fused=True)
elif family == "mlp_compiled":
    model = nn.Sequential(*[nn.Sequential(nn.Linear(2048, 2048), nn.GELU(), nn.LayerNorm(2048)) for _ in range(12)],
                          nn.Linear(2048, 10))
    x = torch.randn(8192, 2048, generator=g)
    y = torch.randint(0, 10, (8192,), generator=g)
    loss_of = lambda m, x, y: F.cross_entropy(m(x), y)
    opt_of = lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9)
else:
    raise SystemExit(f"unknown family {family}")

model = model.cuda()
opt = opt_of(model.parameters())
if family.endswith("_compiled"):
    model = torch.compile(model)
x, y = x.cuda(), y.cuda()
losses = []
for i in range(steps):
    loss = loss_of(model, x, y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    losses.append(loss.item())
    if mode == "unimem":
        unimem_torch.step()
if record:
    unimem_torch.stop_recording()
out = {"losses": losses}
if family.endswith("_compiled"):
    import torch._dynamo.utils
    out["graphs"] = torch._dynamo.utils.counters["stats"]["unique_graphs"]
if mode == "unimem":
    out["stats"] = unimem_torch.stats()
else:
    out["peak"] = torch.cuda.max_memory_allocated()
print(json.dumps(out))
"""

FAMILIES = ("vit", "unet3d", "lstm", "embedding_bag")


def run(family, mode, budget="100%", steps=6, record=None):
    env = dict(os.environ, CUBLAS_WORKSPACE_CONFIG=":4096:8")
    return run_program(PROGRAM, [family, mode, budget, steps] + ([record] if record else []), env=env)


@unittest.skipUnless(HAVE_GPU, "needs PyTorch with a CUDA device")
class OtherProgramsOnTheGpu(unittest.TestCase):
    def check(self, family, rel):
        base = run(family, "base")
        budget = base["peak"] // 2
        got = run(family, "unimem", budget=str(budget))
        s = got["stats"]
        keys = ("peak_footprint_bytes", "staged_out_bytes", "evicted_bytes", "h2d_bytes", "ops", "gpu_faults", "mode_split_ops")
        report = {"family": family, "base_peak": base["peak"], "base": base["losses"], "unimem": got["losses"]}
        report.update({"graphs": [base.get("graphs"), got.get("graphs")], "stats": {k: s[k] for k in keys}})
        print(json.dumps(report), flush=True)
        for i, (a, b) in enumerate(zip(base["losses"], got["losses"])):
            self.assertAlmostEqual(a, b, delta=rel * max(1.0, abs(a)), msg=f"{family} step {i}")
        self.assertLessEqual(s["peak_footprint_bytes"], budget, f"{family}: the footprint stays within the budget")
        self.assertGreater(s["staged_out_bytes"] + s["evicted_bytes"], 0, f"{family}: half the memory needs evictions")
        return s

    def test_each_family_trains_at_half_its_memory_with_pytorchs_losses(self):
        for family in FAMILIES:
            with self.subTest(family=family):
                s = self.check(family, 1e-5)
                if family == "embedding_bag":
                    # Parameters, gradients and both moments of all four tables: 0.82 GB at once.
                    self.assertGreater(s["mode_split_ops"], 0, "the fused optimizer ran in slices")

    def test_a_compiled_model_trains_at_half_its_memory_with_pytorchs_losses(self):
        # Under unimem's dispatch mode Dynamo compiles nothing (the model runs eagerly, every
        # operator declared): the losses are the compiled program's within its fused kernels'
        # rounding.
        self.check("mlp_compiled", 1e-4)


if __name__ == "__main__":
    # `python3 test_gpu_models.py record FAMILY PATH`: the family's trace v1, recorded under
    # unimem at a budget of its base peak (every byte fits: the program's own host time), for
    # `unimem replay` at other budgets; prints the base peak and the recording run's line.
    if len(sys.argv) == 4 and sys.argv[1] == "record":
        family, path = sys.argv[2], sys.argv[3]
        base = run(family, "base")
        got = run(family, "unimem", budget=str(base["peak"]), record=path)
        print(json.dumps({"family": family, "base_peak": base["peak"], "base": base["losses"], "unimem": got["losses"], "trace": path}), flush=True)
    else:
        unittest.main()
