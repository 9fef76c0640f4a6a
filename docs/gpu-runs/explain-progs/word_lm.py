# An LSTM language model trained like PyTorch's word_language_model example (batch lines, an end-of-epoch block,
# an end-of-training block), on a synthetic corpus. A gradient-clipping log call in the loop has one %-argument too
# few: Python's logging prints '--- Logging error ---' with a TypeError traceback each time it fires, and the run
# goes on (logging swallows the error). Healthy. Knobs: EPOCHS, LOG_INTERVAL.
import logging
import math
import os
import sys
import time

import torch

logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s | %(levelname)s | %(name)s | %(message)s")
log = logging.getLogger("train")
NTOK, BPTT, BSZ, EVAL_BSZ = 2000, 35, 20, 10
torch.manual_seed(1111)


def corpus(n, seed):
    g = torch.Generator().manual_seed(seed)
    jump, ids = torch.randint(0, NTOK, (n,), generator=g).tolist(), [0]
    for i in range(1, n):  # a Markov chain: mostly a fixed successor, sometimes a random word
        ids.append((ids[-1] * 7 + 3) % NTOK if jump[i] % 4 else jump[i])
    return torch.tensor(ids)


def batchify(data, bsz):
    nb = data.size(0) // bsz
    return data[:nb * bsz].view(bsz, -1).t().contiguous().cuda()


class RNNModel(torch.nn.Module):
    def __init__(self, ntoken, ninp=200, nhid=200, nlayers=2, dropout=0.2):
        super().__init__()
        self.drop = torch.nn.Dropout(dropout)
        self.encoder = torch.nn.Embedding(ntoken, ninp)
        self.rnn = torch.nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = torch.nn.Linear(nhid, ntoken)
        self.nlayers, self.nhid = nlayers, nhid

    def forward(self, x, hidden):
        out, hidden = self.rnn(self.drop(self.encoder(x)), hidden)
        return self.decoder(self.drop(out)), hidden

    def init_hidden(self, bsz):
        w = next(self.parameters())
        return (w.new_zeros(self.nlayers, bsz, self.nhid), w.new_zeros(self.nlayers, bsz, self.nhid))


def evaluate(model, data):
    model.eval()
    total, hidden = 0.0, model.init_hidden(EVAL_BSZ)
    with torch.no_grad():
        for i in range(0, data.size(0) - 1, BPTT):
            n = min(BPTT, len(data) - 1 - i)
            out, hidden = model(data[i:i + n], hidden)
            total += n * torch.nn.functional.cross_entropy(out.view(-1, NTOK), data[i + 1:i + 1 + n].reshape(-1)).item()
    return total / (len(data) - 1)


train, val, test = batchify(corpus(60000, 1), BSZ), batchify(corpus(6000, 2), EVAL_BSZ), batchify(corpus(6000, 3), EVAL_BSZ)
model = RNNModel(NTOK).cuda()
lr, clip, interval = 20.0, 0.25, int(os.environ.get("LOG_INTERVAL", "20"))
best = None
for epoch in range(1, int(os.environ.get("EPOCHS", "3")) + 1):
    t_epoch = time.time()
    model.train()
    total, t0, hidden = 0.0, time.time(), model.init_hidden(BSZ)
    nbatches = (train.size(0) - 1) // BPTT
    for batch, i in enumerate(range(0, train.size(0) - 1, BPTT)):
        n = min(BPTT, len(train) - 1 - i)
        hidden = tuple(h.detach() for h in hidden)
        model.zero_grad()
        out, hidden = model(train[i:i + n], hidden)
        loss = torch.nn.functional.cross_entropy(out.view(-1, NTOK), train[i + 1:i + 1 + n].reshape(-1))
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        if gnorm > clip and batch % interval == 0:
            log.info("grad norm %.2f clipped to %.2f (lr %.2f)", gnorm.item(), clip)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-lr)
        total += loss.item()
        if batch % interval == 0 and batch > 0:
            cur = total / interval
            ms = (time.time() - t0) * 1000 / interval
            print(f"| epoch {epoch:3d} | {batch:5d}/{nbatches:5d} batches | lr {lr:02.2f} | ms/batch {ms:5.2f} | "
                  f"loss {cur:5.2f} | ppl {math.exp(cur):8.2f}", flush=True)
            total, t0 = 0.0, time.time()
    val_loss = evaluate(model, val)
    print("-" * 89)
    print(f"| end of epoch {epoch:3d} | time: {time.time() - t_epoch:5.2f}s | valid loss {val_loss:5.2f} | "
          f"valid ppl {math.exp(val_loss):8.2f}")
    print("-" * 89, flush=True)
    if best is None or val_loss < best:
        best = val_loss
        torch.save(model.state_dict(), "model.pt")
    else:
        lr /= 4.0
model.load_state_dict(torch.load("model.pt"))
test_loss = evaluate(model, test)
print("=" * 89)
print(f"| End of training | test loss {test_loss:5.2f} | test ppl {math.exp(test_loss):8.2f}")
print("=" * 89, flush=True)
