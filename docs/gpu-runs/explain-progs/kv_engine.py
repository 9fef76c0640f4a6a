# A rollout engine for an RL step, vLLM-style: continuous batching over a paged KV cache (16-token blocks) with a
# tiny one-layer attention LM. At start it profiles memory and sizes the KV pool from gpu_memory_utilization, as
# vLLM does. Knobs:
#   NUM_GPU_BLOCKS: override the pool size (a small pool on purpose: when it is full the engine preempts the newest
#     sequence, frees its blocks and recomputes it later, logging vLLM's preemption warning; the run finishes)
#   GPU_MEMORY_UTILIZATION (0.9); PROMPTS; MAX_SEQS; SEED
import collections
import json
import logging
import math
import os
import time

import torch

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(asctime)s %(filename)s:%(lineno)d] %(message)s",
                    datefmt="%m-%d %H:%M:%S")
log = logging.getLogger("engine")
BLOCK, D, VOCAB = 16, 256, 4096
UTIL = float(os.environ.get("GPU_MEMORY_UTILIZATION", "0.9"))
MAX_SEQS, N = int(os.environ.get("MAX_SEQS", "12")), int(os.environ.get("PROMPTS", "32"))
dev = torch.device("cuda:0")


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, D)
        self.wq, self.wk, self.wv = (torch.nn.Linear(D, D, bias=False) for _ in range(3))
        self.out = torch.nn.Linear(D, VOCAB)


class Seq:
    def __init__(self, i, prompt, max_new):
        self.id, self.tokens, self.prompt_len, self.max_new, self.blocks = i, list(prompt), len(prompt), max_new, []

    @property
    def generated(self):
        return len(self.tokens) - self.prompt_len


@torch.no_grad()
def write_kv(model, kpool, vpool, seq, start):
    ids = torch.tensor(seq.tokens[start:], device=dev)
    pos = torch.arange(start, len(seq.tokens), device=dev)
    table = torch.tensor(seq.blocks, device=dev)
    e = model.emb(ids).half()
    kpool[table[pos // BLOCK], pos % BLOCK] = model.wk(e.float()).half()
    vpool[table[pos // BLOCK], pos % BLOCK] = model.wv(e.float()).half()


@torch.no_grad()
def decode(model, kpool, vpool, seqs, gen):
    lens = torch.tensor([len(s.tokens) for s in seqs], device=dev)
    maxb = max(len(s.blocks) for s in seqs)
    table = torch.tensor([s.blocks + [0] * (maxb - len(s.blocks)) for s in seqs], device=dev)
    last = torch.tensor([s.tokens[-1] for s in seqs], device=dev)
    e = model.emb(last)
    q = model.wq(e)
    k = kpool[table].view(len(seqs), maxb * BLOCK, D).float()
    v = vpool[table].view(len(seqs), maxb * BLOCK, D).float()
    scores = torch.einsum("bd,bld->bl", q, k) / math.sqrt(D)
    scores.masked_fill_(torch.arange(maxb * BLOCK, device=dev)[None, :] >= lens[:, None], float("-inf"))
    ctx = torch.einsum("bl,bld->bd", scores.softmax(-1), v)
    logits = model.out(ctx + e)
    u = torch.rand(logits.shape, device=dev, generator=gen).clamp_(1e-9, 1.0)
    return (logits / 0.8 - torch.log(-torch.log(u))).argmax(-1).tolist()


def main():
    t_start = time.time()
    free0, total = torch.cuda.mem_get_info()
    torch.manual_seed(0)
    model = TinyLM().to(dev).eval()
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    max_len = 64 + 192
    log.info("Initializing an engine (v0.1) with config: model='tiny-attn-lm', dtype=float16, max_seq_len=%d, "
             "block_size=%d, gpu_memory_utilization=%.2f, max_num_seqs=%d, seed=0", max_len, BLOCK, UTIL, MAX_SEQS)
    t0 = time.time()
    torch.cuda.reset_peak_memory_stats()
    dummy = [Seq(-1, [1] * max_len, 0) for _ in range(MAX_SEQS)]
    nb = math.ceil(max_len / BLOCK)
    kd = torch.zeros(MAX_SEQS * nb, BLOCK, D, dtype=torch.half, device=dev)
    for i, s in enumerate(dummy):
        s.blocks = list(range(i * nb, (i + 1) * nb))
    decode(model, kd, kd, dummy, torch.Generator(device=dev).manual_seed(0))
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - weights - kd.numel() * 2
    del kd, dummy
    torch.cuda.empty_cache()
    free1, _ = torch.cuda.mem_get_info()
    non_torch = (total - free1) - torch.cuda.memory_reserved()
    usable = total * UTIL
    kv = usable - weights - non_torch - peak
    G = 2 ** 30
    log.info("Memory profiling takes %.2f seconds\nthe current engine instance can use total_gpu_memory (%.2fGiB) x "
             "gpu_memory_utilization (%.2f) = %.2fGiB\nmodel weights take %.2fGiB; non_torch_memory takes %.2fGiB; "
             "PyTorch activation peak memory takes %.2fGiB; the rest of the memory reserved for KV Cache is %.2fGiB.",
             time.time() - t0, total / G, UTIL, usable / G, weights / G, non_torch / G, peak / G, kv / G)
    block_bytes = 2 * BLOCK * D * 2
    num_blocks = int(kv // block_bytes)
    if os.environ.get("NUM_GPU_BLOCKS"):
        override = int(os.environ["NUM_GPU_BLOCKS"])
        log.info("Overriding num_gpu_blocks=%d with num_gpu_blocks_override=%d", num_blocks, override)
        num_blocks = override
    if num_blocks <= 0:
        raise ValueError("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
                         "initializing the engine.")
    log.info("# GPU blocks: %d, # CPU blocks: 0", num_blocks)
    log.info("Maximum concurrency for %d tokens per request: %.2fx", max_len, num_blocks * BLOCK / max_len)
    kpool = torch.zeros(num_blocks, BLOCK, D, dtype=torch.half, device=dev)
    vpool = torch.zeros_like(kpool)
    free = list(range(num_blocks - 1, -1, -1))
    g = torch.Generator().manual_seed(int(os.environ.get("SEED", "7")))
    reqs = [Seq(i, torch.randint(1, VOCAB, (int(torch.randint(24, 65, (1,), generator=g)),), generator=g).tolist(),
                int(torch.randint(96, 193, (1,), generator=g))) for i in range(N)]
    waiting, running, done = collections.deque(reqs), [], []
    preemptions, peak_used, steps, t_gen = 0, 0, 0, time.time()
    gen = torch.Generator(device=dev).manual_seed(0)
    in_toks = sum(s.prompt_len for s in reqs)

    def preempt(s):
        nonlocal preemptions
        free.extend(s.blocks)
        s.blocks = []
        running.remove(s)
        waiting.appendleft(s)
        preemptions += 1
        if preemptions <= 3 or preemptions % 10 == 0:
            log.warning("Sequence group %d is preempted by PreemptionMode.RECOMPUTE mode because there is not enough "
                        "KV cache space. This can affect the end-to-end performance. Increase "
                        "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
                        "total_num_cumulative_preemption=%d", s.id, preemptions)

    while waiting or running:
        while waiting and len(running) < MAX_SEQS:
            s = waiting[0]
            need = math.ceil(len(s.tokens) / BLOCK)
            if len(free) < need + 1:
                break
            waiting.popleft()
            s.blocks = [free.pop() for _ in range(need)]
            write_kv(model, kpool, vpool, s, 0)
            running.append(s)
        for s in list(running):
            if s not in running or len(s.tokens) < len(s.blocks) * BLOCK:
                continue
            while not free:
                victim = running[-1]
                preempt(victim)
                if victim is s:
                    break
            if s in running:
                s.blocks.append(free.pop())
        if not running:
            continue
        peak_used = max(peak_used, num_blocks - len(free))
        new = decode(model, kpool, vpool, running, gen)
        steps += 1
        for s, tok in zip(list(running), new):
            s.tokens.append(tok)
            write_kv(model, kpool, vpool, s, len(s.tokens) - 1)
            if s.generated >= s.max_new:
                running.remove(s)
                free.extend(s.blocks)
                s.blocks = []
                done.append(s)
                if len(done) % 8 == 0 or len(done) == N:
                    el = time.time() - t_gen
                    out_toks = sum(d.generated for d in done)
                    bar = "█" * (10 * len(done) // N)
                    print(f"Processed prompts: {100 * len(done) // N:3d}%|{bar:<10}| {len(done)}/{N} "
                          f"[{int(el) // 60:02d}:{int(el) % 60:02d}, {len(done) / el:.2f}it/s, est. speed input: "
                          f"{in_toks / el:.2f} toks/s, output: {out_toks / el:.2f} toks/s]", flush=True)
    out_toks = sum(d.generated for d in done)
    log.info("finished %d requests in %.2f s: %d decode steps, %d generated tokens, %d preemptions, KV cache usage "
             "peaked at %.1f%%", len(done), time.time() - t_gen, steps, out_toks, preemptions, 100 * peak_used / num_blocks)
    path = "rollouts-step0001.jsonl"
    with open(path, "w") as f:
        for s in sorted(done, key=lambda s: s.id):
            f.write(json.dumps({"id": s.id, "prompt_len": s.prompt_len, "response": s.tokens[s.prompt_len:]}) + "\n")
    print(f"rollout step 1: wrote {len(done)} samples to {path} (mean response length "
          f"{out_toks / len(done):.1f}) in {time.time() - t_start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
