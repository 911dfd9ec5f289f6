"""Trains torchvision's ResNet-50 (batch 64, 224x224 images, SGD with momentum) for a few steps
on synthetic data, in one of four ways of fitting GPU memory: base (as PyTorch runs it),
unimem (unimem as the allocator, at a budget below what base needs), checkpoint
(torch.utils.checkpoint on every bottleneck block) or save_on_cpu (activations saved to pinned
host memory). Prints one JSON line per mode: median step time, peak device bytes, final loss.

    python3 python/examples/resnet50.py --mode all --budget 0.5
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402


def main():
    args = _common.start(__file__, default_batch=64)
    if args is None:
        return
    import torch
    import torchvision
    from torch.utils.checkpoint import checkpoint

    model = torchvision.models.resnet50(num_classes=1000).cuda()
    if args.mode == "checkpoint":

        class Checkpointed(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, x):
                return checkpoint(self.inner, x, use_reentrant=False)

        for layer in (model.layer1, model.layer2, model.layer3, model.layer4):
            for i in range(len(layer)):
                layer[i] = Checkpointed(layer[i])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    images = torch.randn(args.batch, 3, 224, 224, generator=g).cuda()
    labels = torch.randint(0, 1000, (args.batch,), generator=g).cuda()
    loss_fn = torch.nn.CrossEntropyLoss()
    step = _common.training_step(args, opt, lambda: loss_fn(model(images), labels))
    _common.train(args, "resnet50", step)


if __name__ == "__main__":
    main()
