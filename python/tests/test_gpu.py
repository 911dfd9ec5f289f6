"""On a GPU with PyTorch (skipped elsewhere): unimem as PyTorch's allocator computes the same
losses as PyTorch alone, stays within its budget, and leaks nothing over 100 steps. Each run
is a process of its own, since PyTorch chooses its allocator once per process.

    python3 -m unittest python/tests/test_gpu.py -v
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _gpu import HAVE_GPU, run_program  # noqa: E402

# A small convolutional network trained on fixed data; prints one JSON line.
PROGRAM = r"""
import json, sys
sys.path.insert(0, %(root)r)
mode, budget, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "unimem":
    import unimem_torch
    unimem_torch.enable(budget=budget)
import torch
torch.manual_seed(0)
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.BatchNorm2d(64), torch.nn.ReLU(),
    torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.BatchNorm2d(64), torch.nn.ReLU(),
    torch.nn.Conv2d(64, 128, 3, padding=1, stride=2), torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(128, 10)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(1)
x = torch.randn(64, 3, 128, 128, generator=g).cuda()
y = torch.randint(0, 10, (64,), generator=g).cuda()
losses, live = [], []
for i in range(steps):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    losses.append(loss.item())
    if mode == "unimem":
        unimem_torch.step()
        if i in (9, steps - 1):
            s = unimem_torch.stats()
            live.append([s["live_regions"], s["live_bytes"], s["mallocs"] - s["frees"]])
out = {"losses": losses, "live": live}
if mode == "unimem":
    out["stats"] = unimem_torch.stats()
else:
    out["peak"] = torch.cuda.max_memory_allocated()
print(json.dumps(out))
"""


def run(mode, budget="100%", steps=20):
    return run_program(PROGRAM, [mode, budget, steps])


@unittest.skipUnless(HAVE_GPU, "needs PyTorch with a CUDA device")
class OnTheGpu(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.base = run("base")

    def test_losses_match_pytorch_alone_step_for_step_at_half_the_memory(self):
        budget = self.base["peak"] // 2
        got = run("unimem", budget=str(budget))
        for i, (a, b) in enumerate(zip(self.base["losses"], got["losses"])):
            self.assertAlmostEqual(a, b, delta=1e-5 * max(1.0, abs(a)), msg=f"step {i}")
        s = got["stats"]
        self.assertEqual(s["budget_bytes"], budget)
        self.assertLessEqual(s["peak_footprint_bytes"], budget, "the footprint stays within the budget")
        self.assertGreater(s["staged_out_bytes"], 0, "half the memory is not enough without evicting")
        self.assertGreater(s["staged_out_bytes"], s["evicted_bytes"], "the room for outputs is staged, not migrated")
        self.assertGreater(s["ops"], 20 * 10, "operators were declared")

    def test_no_leak_over_100_steps(self):
        got = run("unimem", budget=str(self.base["peak"] // 2), steps=100)
        at_10, at_100 = got["live"]
        self.assertEqual(at_10, at_100, "live regions, bytes and allocations outstanding at step 10 and step 100")


if __name__ == "__main__":
    unittest.main()
