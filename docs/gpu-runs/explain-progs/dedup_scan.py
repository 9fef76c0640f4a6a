# A dual-encoder (retrieval) fine-tune that shares its GPU with an inference server, so it caps itself with
# torch.cuda.set_per_process_memory_fraction to BUDGET_GIB. Training uses in-batch negatives over 16384 pairs (a
# 16384 x 16384 score matrix), which leaves several GiB in the caching allocator; then a near-duplicate scan of N
# passage embeddings computes the N x N cosine similarities in row blocks (sized from the budget left), top-5 per
# row. At the end it prints torch.cuda.memory_summary() ("CUDA OOMs: 0", and the cudaMalloc retries that the cap
# caused when the scan's first block needed the cached memory flushed) and a note about them.
#   default: healthy
#   SCAN_BLOCK=0: the scan's block size from a config where 0 means all rows at once: one N x N float32 score matrix
#     (144 GiB for N=196608) -> torch.OutOfMemoryError
#   BUDGET_GIB (12), N (196608), SCAN_BLOCK (-1: from the budget), STEPS (30), DEVICE (cuda; cpu for a dry run: no cap,
#   no memory summary, small sizes)
import os
import time

import torch
import torch.nn.functional as F

dev = torch.device(os.environ.get("DEVICE", "cuda"))
cuda = dev.type == "cuda"
GIB = 1 << 30
budget = float(os.environ.get("BUDGET_GIB", "12"))
N = int(os.environ.get("N", "196608" if cuda else "8192"))
B = 16384 if cuda else 1024
steps = int(os.environ.get("STEPS", "30"))
scan_block = int(os.environ.get("SCAN_BLOCK", "-1"))


def main():
    torch.set_float32_matmul_precision("high")
    if cuda:
        total = torch.cuda.get_device_properties(dev).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, budget * GIB / total), dev)
        print(f"memory cap: {budget:.0f} GiB of {total / GIB:.1f} GiB on {torch.cuda.get_device_name(dev)} "
              f"(the rest is the inference server's)", flush=True)
    torch.manual_seed(0)
    enc = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).to(dev)
    opt = torch.optim.AdamW(enc.parameters(), lr=1e-3)
    proj = torch.randn(512, 512, device=dev) / 512 ** 0.5
    t0 = time.time()
    for step in range(1, steps + 1):
        q = torch.randn(B, 512, device=dev)
        p = q @ proj + 0.3 * torch.randn(B, 512, device=dev)
        zq, zp = F.normalize(enc(q), dim=-1), F.normalize(enc(p), dim=-1)
        scores = zq @ zp.t() / 0.05
        loss = F.cross_entropy(scores, torch.arange(B, device=dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(f"step {step}/{steps} in-batch loss {loss.item():.4f} "
                  f"({time.time() - t0:.1f} s)", flush=True)
    del q, p, zq, zp, scores, loss
    if cuda:
        print(f"after training: allocated {torch.cuda.memory_allocated() / GIB:.2f} GiB, reserved "
              f"{torch.cuda.memory_reserved() / GIB:.2f} GiB", flush=True)

    # the passages to scan: 1 % of them near-copies of others
    with torch.no_grad():
        g = torch.Generator(device=dev).manual_seed(1)
        emb = torch.empty(N, 256, device=dev)
        for i in range(0, N, 16384):
            x = torch.randn(min(16384, N - i), 512, device=dev, generator=g)
            emb[i:i + len(x)] = F.normalize(enc(x), dim=-1)
        ndup = N // 100
        src = torch.randint(0, N - ndup, (ndup,), device=dev, generator=g)
        emb[N - ndup:] = F.normalize(emb[src] + 0.01 * torch.randn(ndup, 256, device=dev, generator=g), dim=-1)
        if scan_block > 0:
            rows = scan_block
        elif scan_block == 0:
            rows = N
        else:
            left = budget * GIB - torch.cuda.memory_allocated() if cuda else 2 * GIB
            rows = max(1024, int(0.8 * left / (4 * N)) // 1024 * 1024)
        print(f"near-duplicate scan: {N} passages, blocks of {rows} rows ({rows * N * 4 / GIB:.2f} GiB of scores "
              f"each)", flush=True)
        t1 = time.time()
        pairs = 0
        for r0 in range(0, N, rows):
            s = emb[r0:r0 + rows] @ emb.t()
            idx = torch.arange(s.shape[0], device=dev)
            s[idx, r0 + idx] = -1.0
            top, _ = s.topk(5, dim=1)
            pairs += int((top[:, 0] > 0.95).sum())
            del s
        if cuda:
            torch.cuda.synchronize()
    print(f"scan done in {time.time() - t1:.1f} s: {pairs} passages with a near-duplicate (cosine > 0.95)",
          flush=True)
    if cuda:
        print(torch.cuda.memory_summary(dev, abbreviated=True), flush=True)
        st = torch.cuda.memory_stats(dev)
        print(f"note: {st.get('num_alloc_retries', 0)} cudaMalloc retries and {st.get('num_ooms', 0)} OOMs under the "
              f"{budget:.0f} GiB cap (the allocator flushed its cache to fit the scan blocks); peak reserved "
              f"{st.get('reserved_bytes.all.peak', 0) / GIB:.2f} GiB", flush=True)
    os.makedirs("dedup-out", exist_ok=True)
    torch.save(enc.state_dict(), "dedup-out/encoder.pt")
    print(f"done: {steps} training steps, scan of {N} passages, encoder saved to dedup-out/encoder.pt", flush=True)


if __name__ == "__main__":
    main()
