# Corpus packing: a multiprocessing pool (fork, made before CUDA is touched) tokenizes raw documents into packed
# shards; documents that are not valid UTF-8 are logged and skipped. The main process then checks every shard
# (a per-document checksum pass on the CPU) and computes token statistics on the GPU, writes a manifest.
# Pool results are awaited with a 10 s progress timeout (PROGRESS_TIMEOUT).
import hashlib
import json
import logging
import multiprocessing as mp
import os
import random
import time
import traceback

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(processName)s %(levelname)s %(message)s")
log = logging.getLogger("pack")
NSHARDS, DOCS = 16, 400
OUTDIR = "packed"


def worker_init():
    with open("pool.pids", "a") as f:
        f.write(f"{os.getpid()}\n")


def pack(shard):
    rnd = random.Random(shard)
    ids, bad = [], 0
    t_end = time.time() + 0.6  # tokenizer work
    for d in range(DOCS):
        raw = bytes(rnd.randrange(32, 127) for _ in range(200))
        if (shard * DOCS + d) % 997 == 0:
            raw = raw[:50] + b"\xff\xfe" + raw[50:]  # a document with a broken encoding
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            bad += 1
            if bad == 1:
                log.error("shard %d doc %d: cannot decode, skipped\n%s", shard, d, traceback.format_exc().rstrip())
            else:
                log.error("shard %d doc %d: cannot decode, skipped (%s)", shard, d, e)
            continue
        ids.extend(ord(c) % 251 for c in text)
    while time.time() < t_end:
        hashlib.sha256(bytes(ids[:4096])).digest()
    path = os.path.join(OUTDIR, f"shard_{shard:03d}.bin")
    with open(path, "wb") as f:
        f.write(bytes(ids))
    return shard, len(ids), bad


def main():
    os.makedirs(OUTDIR, exist_ok=True)
    open("pool.pids", "w").close()
    timeout = float(os.environ.get("PROGRESS_TIMEOUT", "10"))
    done, skipped, tokens = [], 0, 0
    with mp.get_context("fork").Pool(4, initializer=worker_init) as pool:
        it = pool.imap_unordered(pack, range(NSHARDS))
        for _ in range(NSHARDS):
            try:
                shard, n, bad = it.next(timeout=timeout)
            except mp.TimeoutError:
                raise RuntimeError(f"packing stalled: no shard finished in {timeout:.0f} s "
                                   f"({len(done)}/{NSHARDS} done, missing {sorted(set(range(NSHARDS)) - set(done))})")
            done.append(shard); skipped += bad; tokens += n
            log.info("shard %d packed: %d tokens, %d docs skipped (%d/%d)", shard, n, bad, len(done), NSHARDS)

    import torch
    dev = torch.device("cpu") if os.environ.get("DEVICE") == "cpu" else torch.device("cuda", 0)
    hist = torch.zeros(251, dtype=torch.int64, device=dev)
    digests = {}
    for s in sorted(done):
        data = open(os.path.join(OUTDIR, f"shard_{s:03d}.bin"), "rb").read()
        h = hashlib.sha256()
        for i in range(0, len(data), 64):  # checksum per 64-token block (as the loader verifies them)
            h.update(hashlib.sha256(data[i:i + 64]).digest())
        for _ in range(int(os.environ.get("VERIFY_ROUNDS", "800"))):
            for i in range(0, len(data), 64):
                hashlib.blake2b(data[i:i + 64]).digest()
        digests[s] = h.hexdigest()[:16]
        t = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(dev).long()
        hist += torch.bincount(t, minlength=251)
    p = hist.double() / hist.sum()
    ent = -(p[p > 0] * p[p > 0].log2()).sum().item()
    json.dump({"shards": digests, "tokens": tokens, "skipped_docs": skipped}, open(os.path.join(OUTDIR, "manifest.json"), "w"))
    print(f"\npacked {len(done)} shards, {tokens} tokens, {skipped} documents skipped; unigram entropy {ent:.3f} bits")
    print(f"manifest written: {OUTDIR}/manifest.json")


if __name__ == "__main__":
    main()
