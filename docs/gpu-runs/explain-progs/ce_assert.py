# A classifier trained with a label outside its classes: cross_entropy on the GPU trips a device-side assert.
import torch
import torch.nn.functional as F

torch.manual_seed(0)
model = torch.nn.Linear(32, 10).cuda()
for step in range(3):
    x = torch.randn(16, 32, device="cuda")
    labels = torch.randint(0, 10, (16,), device="cuda")
    if step == 2:
        labels[3] = 10  # one label past the last class
    loss = F.cross_entropy(model(x), labels)
    loss.backward()
    print(f"step {step} loss {loss.item():.4f}", flush=True)
