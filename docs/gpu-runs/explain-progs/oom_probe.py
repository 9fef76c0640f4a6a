# An automatic batch-size finder: tries a batch, halves it on torch.OutOfMemoryError, then trains with half the
# largest batch that fit (a healthy run that prints the allocator's out-of-memory messages it recovered from).
import torch

torch.backends.cuda.matmul.allow_tf32 = True
print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}", flush=True)
model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096)).cuda()
batch = 1 << 26
while batch > 1:
    failed = None
    try:
        x = torch.randn(batch, 4096, device="cuda")
        loss = model(x).pow(2).mean()
        loss.backward()
        torch.cuda.synchronize()
    except torch.OutOfMemoryError as e:
        failed = str(e)
    x = loss = None
    model.zero_grad(set_to_none=True)
    torch.cuda.empty_cache()
    if failed is None:
        break
    print(f"batch {batch} does not fit: torch.OutOfMemoryError: {failed}", flush=True)
    batch //= 2
batch //= 2
print(f"largest batch that fits: {batch * 2}; training with {batch}", flush=True)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(5):
    x = torch.randn(batch, 4096, device="cuda")
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated() >> 30} GiB", flush=True)
print("training done", flush=True)
