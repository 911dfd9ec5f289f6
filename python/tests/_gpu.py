"""What the GPU tests share: the package's directory, whether PyTorch sees a GPU, and a
program run in a process of its own (PyTorch chooses its allocator once per process)."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

try:
    import torch

    HAVE_GPU = torch.cuda.is_available()
except ImportError:
    HAVE_GPU = False


def run_program(program, args, env=None):
    """Runs `program` (`%(root)r` in it: the package's directory) with `args` in a process of
    its own, and returns its last line of output as JSON."""
    code = program % {"root": ROOT}
    cmd = [sys.executable, "-c", code, *(str(a) for a in args)]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, check=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])
