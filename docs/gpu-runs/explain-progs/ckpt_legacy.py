# Fine-tuning resumes from a pretraining checkpoint written the way older training scripts wrote them (the
# argparse.Namespace of the run's arguments pickled beside the weights), loaded with a plain torch.load(path), as
# that code was written before torch made weights_only=True the default.
import argparse
import os

import torch

os.makedirs("pretrain", exist_ok=True)
args = argparse.Namespace(hidden=1024, layers=2, lr=3e-4, seq_len=512, tokenizer="gpt2")
model = torch.nn.Sequential(torch.nn.Linear(512, args.hidden), torch.nn.GELU(), torch.nn.Linear(args.hidden, 512)).cuda()
torch.save({"args": args, "model": model.state_dict(), "iteration": 5000}, "pretrain/iter_5000.pt")
print(f"torch {torch.__version__}: pretraining checkpoint pretrain/iter_5000.pt written (iteration 5000)", flush=True)

print("finetune: loading pretrain/iter_5000.pt", flush=True)
ckpt = torch.load("pretrain/iter_5000.pt", map_location="cuda:0")
pre = ckpt["args"]
model = torch.nn.Sequential(torch.nn.Linear(512, pre.hidden), torch.nn.GELU(), torch.nn.Linear(pre.hidden, 512)).cuda()
model.load_state_dict(ckpt["model"])
opt = torch.optim.AdamW(model.parameters(), lr=pre.lr / 10)
for step in range(5):
    x = torch.randn(32, 512, device="cuda")
    loss = (model(x) - x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"finetune step {step} loss {loss.item():.4f}", flush=True)
