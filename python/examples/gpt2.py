"""Trains GPT-2 small (transformers, from its config: 124M parameters; batch 8, sequence 1024,
AdamW) for a few steps on synthetic tokens, in one of four ways of fitting GPU memory: base,
unimem (unimem as the allocator, at a budget below what base needs), checkpoint (the model's
gradient checkpointing) or save_on_cpu. Prints one JSON line per mode: median step time, peak
device bytes, final loss.

    python3 python/examples/gpt2.py --mode all --budget 0.5
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402


def main():
    args = _common.start(__file__, default_batch=8)
    if args is None:
        return
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_positions=1024)
    model = GPT2LMHeadModel(config).cuda()
    model.train()
    if args.mode == "checkpoint":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, config.vocab_size, (args.batch, 1024), generator=g).cuda()
    step = _common.training_step(args, opt, lambda: model(input_ids=tokens, labels=tokens).loss)
    _common.train(args, "gpt2", step)


if __name__ == "__main__":
    main()
