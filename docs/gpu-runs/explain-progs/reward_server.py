# An RL loop whose rewards come from a helper process (spawn) over a pipe; the policy stays on the GPU. Knobs:
#   CRASH_ON=b: the helper's first life crashes in native code (SIGSEGV) on batch b; RESPAWN: helpers the trainer may
#   start after one dies; BATCHES; PAUSE: seconds the helper takes per batch; PIDFILE: the helper writes its pid there
import ctypes
import faulthandler
import multiprocessing as mp
import os
import time

import torch


def helper(conn, life, crash_on, pause, pidfile):
    faulthandler.enable()
    if pidfile:
        with open(pidfile, "w") as f:
            f.write(str(os.getpid()))
    print(f"[reward] worker pid {os.getpid()} up (life {life})", flush=True)
    while True:
        msg = conn.recv()
        if msg is None:
            return
        batch, tokens = msg
        if life == 0 and batch == crash_on:
            ctypes.string_at(0)  # the native scorer reads through a null pointer on this batch
        time.sleep(pause)
        conn.send((batch, [-abs(t - 8) / 8 for t in tokens]))


def start(ctx, life):
    parent, child = ctx.Pipe()
    p = ctx.Process(target=helper, args=(child, life, int(os.environ.get("CRASH_ON", "-1")),
                                         float(os.environ.get("PAUSE", "0.05")), os.environ.get("PIDFILE")))
    p.start()
    child.close()
    return p, parent


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    torch.manual_seed(0)
    policy = torch.nn.Linear(64, 16).cuda()
    opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
    print(f"torch {torch.__version__}; policy on {torch.cuda.get_device_name(0)}", flush=True)
    respawn, life = int(os.environ.get("RESPAWN", "3")), 0
    proc, conn = start(ctx, life)
    for batch in range(int(os.environ.get("BATCHES", "12"))):
        logits = policy(torch.randn(32, 64, device="cuda"))
        dist = torch.distributions.Categorical(logits=logits)
        tokens = dist.sample()
        while True:
            try:
                conn.send((batch, tokens.tolist()))
                _, rewards = conn.recv()
                break
            except (EOFError, BrokenPipeError, ConnectionResetError) as e:
                proc.join(5)
                if life >= respawn:
                    raise RuntimeError(f"reward worker pid {proc.pid} exited with code {proc.exitcode} "
                                       f"({life} of {respawn} respawns used)") from e
                life += 1
                print(f"WARNING reward worker pid {proc.pid} died (exitcode {proc.exitcode}) on batch {batch}; "
                      f"respawning ({life}/{respawn})", flush=True)
                proc, conn = start(ctx, life)
        r = torch.tensor(rewards, device="cuda")
        loss = -(dist.log_prob(tokens) * (r - r.mean())).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"iter {batch} mean reward {r.mean().item():.4f} loss {loss.item():.4f}", flush=True)
    conn.send(None)
    proc.join(10)
