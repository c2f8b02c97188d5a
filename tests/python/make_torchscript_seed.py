"""Regenerates tests/data/torchscript/small.pt: a small TorchScript file (a submodule, a
loop, an if, a script class) whose code/ text seeds the fuzz_archive target's TorchScript
check (make fuzz). Run from the repo root: python tests/python/make_torchscript_seed.py"""

import os

import torch

OUT = os.path.join(os.path.dirname(__file__), "..", "data", "torchscript", "small.pt")


@torch.jit.script
class Scale:
    def __init__(self, k: float):
        self.k = k


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)
        self.scale = Scale(0.5)

    def forward(self, x, n: int):
        for i in range(n):
            x = x + i
        if bool(x.sum() > 0):
            x = x * self.scale.k
        return torch.relu(self.fc(x))


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.jit.script(Small()).save(OUT)
