# One training step of an MLP under torch.compile (inductor), printing the compiler stack's versions.
import torch

try:
    import triton
    tv = getattr(triton, "__version__", "?")
except Exception as e:  # noqa: BLE001
    tv = f"not importable ({e})"
print(f"torch {torch.__version__} cuda {torch.version.cuda}; triton {tv}", flush=True)
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).cuda()
step = torch.compile(model)
x = torch.randn(64, 512, device="cuda")
loss = step(x).pow(2).mean()
loss.backward()
print("compiled step ok", loss.item(), flush=True)
