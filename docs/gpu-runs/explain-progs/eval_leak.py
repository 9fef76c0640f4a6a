# A few training steps, then a validation pass that keeps every output on the GPU for its metrics.
import torch

print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}", flush=True)
model = torch.nn.Sequential(torch.nn.Linear(4096, 16384), torch.nn.GELU(), torch.nn.Linear(16384, 4096)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(5):
    x = torch.randn(8192, 4096, device="cuda")
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"train step {step} loss {loss.item():.4f} mem {torch.cuda.memory_allocated() >> 20} MiB", flush=True)


def validate(batches):
    model.eval()
    outputs = []
    for i in range(batches):
        x = torch.randn(8192, 4096, device="cuda")
        outputs.append(model(x))
        if i % 10 == 0:
            print(f"val batch {i} mem {torch.cuda.memory_allocated() >> 20} MiB", flush=True)
    return torch.cat(outputs).pow(2).mean().item()


print("val loss", validate(400), flush=True)
