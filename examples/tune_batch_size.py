"""An entry-point script for `stoker tune batch-size --script examples/tune_batch_size.py`.

The contract (see `stoker tune batch-size --help`): the script defines make_batch(n) and
train_step(batch); optionally `optimizer` (its class picks the learning-rate rule) and
make_loader(n) (your input pipeline, measured at the knee). A small convolutional network
on 32x32 images, on CUDA when there is one, else on the CPU.
"""
import torch
import torch.nn as nn

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(64 * 8 * 8, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()


def make_batch(n):
    return (torch.randn(n, 3, 32, 32, device=device),
            torch.randint(0, 10, (n,), device=device))


def train_step(batch):
    x, y = batch
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    optimizer.step()


def make_loader(n):
    """A DataLoader over synthetic CPU tensors: what the knee's rate is checked against."""
    ds = torch.utils.data.TensorDataset(torch.randn(2048, 3, 32, 32),
                                        torch.randint(0, 10, (2048,)))
    return torch.utils.data.DataLoader(ds, batch_size=n, shuffle=True)
