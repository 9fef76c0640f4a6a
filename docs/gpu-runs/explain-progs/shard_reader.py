# A language-model run that memory-maps all of its tokenized data shards at start-up (each shard open as a file and
# as an mmap: two descriptors a shard). The data folder (SHARDS files of 16 K int32 tokens) is written first, as a
# preprocessing job had left it.
#   default: with a soft open-file limit below what the shards need (`ulimit -Sn 256`), opening fails with EMFILE
#     (logged as a WARNING with its traceback); the loader raises its soft RLIMIT_NOFILE up to the hard limit, opens
#     them all again and trains; a data summary table and a final line (healthy)
#   with the hard limit that low as well (`ulimit -n 256`) the soft limit cannot be raised far enough: the loader
#     logs why and re-raises the OSError (Too many open files)
#   SHARDS (400), STEPS (150), DEVICE (cuda; cpu for a dry run)
import errno
import logging
import mmap
import os
import resource
import struct
import time

import torch

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
log = logging.getLogger("data.mmap_shards")
dev = torch.device(os.environ.get("DEVICE", "cuda"))
n_shards = int(os.environ.get("SHARDS", "400"))
steps = int(os.environ.get("STEPS", "150"))
TOK = 16384
VOCAB = 8192
DATA = "tok-shards/pile-subset-v2"


def write_shards():
    os.makedirs(DATA, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    for i in range(n_shards):
        path = f"{DATA}/shard-{i:05d}.bin"
        if not os.path.exists(path):
            toks = (torch.arange(TOK, dtype=torch.int32) * 17 + 131 * i) % VOCAB  # a learnable bigram rule
            noise = torch.rand(TOK, generator=g) < 0.1
            toks[noise] = torch.randint(0, VOCAB, (int(noise.sum()),), generator=g, dtype=torch.int32)
            with open(path, "wb") as f:
                f.write(struct.pack(f"{TOK}i", *toks.tolist()))
    return sorted(f"{DATA}/{n}" for n in os.listdir(DATA))[:n_shards]


class Shards:
    def __init__(self, paths):
        self.files, self.maps = [], []
        try:
            for p in paths:
                f = open(p, "rb")
                self.files.append(f)
                self.maps.append(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
        except OSError:
            self.close()
            raise

    def close(self):
        for m in self.maps:
            m.close()
        for f in self.files:
            f.close()
        self.maps, self.files = [], []

    def sample(self, i, start, n):
        return struct.unpack_from(f"{n}i", self.maps[i], 4 * start)


def open_shards(paths):
    try:
        return Shards(paths)
    except OSError as e:
        if e.errno != errno.EMFILE:
            raise
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        need = 2 * len(paths) + 128
        log.warning("opening %d shards of %s failed with soft RLIMIT_NOFILE=%d", len(paths), DATA, soft,
                    exc_info=True)
        want = need if hard == resource.RLIM_INFINITY else min(hard, max(need, 4096))
        if want < need:
            log.error("cannot open %d shards: %d descriptors needed, hard RLIMIT_NOFILE is %d (raise `ulimit -n` in "
                      "the job script)", len(paths), need, hard)
            raise
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        log.info("raised soft RLIMIT_NOFILE %d -> %d (hard %s); opening the shards again", soft, want,
                 "unlimited" if hard == resource.RLIM_INFINITY else hard)
        return Shards(paths)


def main():
    torch.manual_seed(0)
    paths = write_shards()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    log.info("RLIMIT_NOFILE soft=%d hard=%s; %d shards in %s", soft,
             "unlimited" if hard == resource.RLIM_INFINITY else hard, len(paths), DATA)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 256), torch.nn.Linear(256, 1024), torch.nn.GELU(),
                                torch.nn.Linear(1024, VOCAB)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    log.info("model on %s: %.1f M parameters", torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
             sum(p.numel() for p in model.parameters()) / 1e6)
    t0 = time.time()
    shards = open_shards(paths)
    log.info("mapped %d shards (%.1f M tokens) in %.2f s", len(shards.maps), len(shards.maps) * TOK / 1e6,
             time.time() - t0)
    g = torch.Generator().manual_seed(1)
    reads = [0] * len(shards.maps)
    first = last = None
    for step in range(1, steps + 1):
        rows = []
        for _ in range(16):
            i = int(torch.randint(0, len(shards.maps), (1,), generator=g))
            start = int(torch.randint(0, TOK - 257, (1,), generator=g))
            rows.append(shards.sample(i, start, 257))
            reads[i] += 1
        batch = torch.tensor(rows, dtype=torch.long, device=dev)
        logits = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step == 1:
            first = loss.item()
        if step % 25 == 0:
            last = loss.item()
            log.info("step %d/%d loss %.4f", step, steps, last)
    shards.close()
    groups = [range(a, min(a + 100, len(reads))) for a in range(0, len(reads), 100)]
    print(f"{'shards':>12} {'reads':>7} {'min':>5} {'max':>5}")
    for r in groups:
        sub = reads[r.start:r.stop]
        print(f"{r.start:>5}-{r.stop - 1:<6} {sum(sub):>7} {min(sub):>5} {max(sub):>5}")
    print(f"run finished: {steps} steps over {len(reads)} shards, loss {first:.3f} -> {last:.3f}", flush=True)


if __name__ == "__main__":
    main()
