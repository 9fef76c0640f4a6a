# fp16 mixed precision with a GradScaler that starts far too high: the first steps overflow, are skipped and the
# scale backs off, then training goes on (a healthy run that prints inf/nan gradients and torch's warnings).
import torch

print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}", flush=True)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
scaler = torch.cuda.amp.GradScaler(init_scale=2.0 ** 40)
for step in range(40):
    x = torch.randn(64, 512, device="cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    before = scaler.get_scale()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    sched.step()
    skipped = scaler.get_scale() < before
    print(f"step {step} loss {loss.item():.4f} grad_norm {norm.item():.4g} scale {scaler.get_scale():.0f}"
          f"{' skipped (inf/nan gradients)' if skipped else ''}", flush=True)
print("training done", flush=True)
