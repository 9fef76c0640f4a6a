#!/usr/bin/env bash
# Real fault logs for `envbuild explain` (issue 25), made on ONE H200 (kind nvidia-h200) in one call of < 6 min.
# Small torch/NCCL/gloo programs, each run with NCCL_DEBUG=INFO under a timeout, each with a known cause;
# healthy runs that must come out clean beside them. Needs only python3 with torch (2.11+cu130 and its NCCL
# 2.28.9 wheel); no envbuild. NVLink multicast stays off (NCCL_NVLS_ENABLE=0; nothing calls cuMulticastCreate).
#
#   run (repo root, $OUT set by the device tool):  bash docs/gpu-runs/s6-explain-logs.sh
#   result: $OUT/s6-explain-logs.tar.gz = s6-explain-logs/{h200-s6-NN.log, cases.toml, summary.txt, node.txt}
#   cases.toml holds one [[log]] per case in the corpus manifest's format (cause, established_by, notes);
#   see tests/explain/corpus/README.md ("H200 fault logs") for how they enter the corpus.
set -u
OUT=${OUT:?set OUT}
LIMIT=${LIMIT:-330}            # seconds for the whole script (the call must stay < 6 min)
PY=${PYTHON:-python3}
W=/tmp/s6-explain-logs; rm -rf "$W"; mkdir -p "$W/prog"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
start=$SECONDS
SYS_NCCL=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}')
STUB=$(ls /usr/local/cuda/lib64/stubs/libcuda.so /usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so 2>/dev/null | head -1)

# ---------------------------------------------------------------- the programs (tiny, one job each)
cat > "$W/prog/pg1.py" <<'EOF'
# one-rank NCCL process group over a FileStore and one all_reduce; prints what torch carries
import os, sys, tempfile, importlib.metadata as md, torch, torch.distributed as dist
print(f"torch {torch.__version__} cuda {torch.version.cuda}")
for d in md.distributions():  # the NCCL wheel this env installed, as pip lists it
    if (d.metadata["Name"] or "").startswith("nvidia-nccl"):
        print(f"{d.metadata['Name']} {d.version}")
print(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')!r} device_count {torch.cuda.device_count()}")
store = dist.FileStore(tempfile.mktemp(), 1)
dev = torch.device("cuda:0")
dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=dev)
x = torch.ones(1 << 20, device=dev)
dist.all_reduce(x); torch.cuda.synchronize()
print("all_reduce ok", x[0].item())
dist.destroy_process_group()
EOF
cat > "$W/prog/tensor.py" <<'EOF'
import torch
print(f"torch {torch.__version__}; torch.cuda.is_available() {torch.cuda.is_available()}")
x = torch.zeros(1).cuda()
print("ok", x)
EOF
cat > "$W/prog/ordinal.py" <<'EOF'
import torch
print(f"torch {torch.__version__}; {torch.cuda.device_count()} device(s) visible")
torch.cuda.set_device(3)
torch.zeros(1, device="cuda")
EOF
cat > "$W/prog/oom.py" <<'EOF'
import torch
print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
x = torch.empty(400 * (1 << 30) // 4, dtype=torch.float32, device="cuda")  # 400 GiB
EOF
cat > "$W/prog/gloo2.py" <<'EOF'
# two ranks of gloo on the CPU (torchrun); MODE picks the fault
import os, signal, time, datetime, torch, torch.distributed as dist
mode = os.environ.get("MODE", "ok")
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=int(os.environ.get("PG_TIMEOUT", "20"))))
r = dist.get_rank()
if mode == "kill" and r == 1:
    print(f"[rank{r}] killing myself with SIGKILL before the all_reduce", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
if mode == "skip" and r == 1:
    print(f"[rank{r}] skipping the all_reduce and sleeping", flush=True)
    time.sleep(40)
x = torch.ones(3 if (mode == "mismatch" and r == 1) else 2)
dist.all_reduce(x)
print(f"[rank{r}] all_reduce ok {x.tolist()}", flush=True)
dist.barrier()
dist.destroy_process_group()
EOF
cat > "$W/prog/dupgpu.py" <<'EOF'
# two ranks of NCCL on the same GPU (torchrun --nproc-per-node 2, both on cuda:0)
import torch, torch.distributed as dist
dev = torch.device("cuda:0")
dist.init_process_group("nccl", device_id=dev)
x = torch.ones(4, device=dev); dist.all_reduce(x); torch.cuda.synchronize()
print("all_reduce ok")
EOF
cat > "$W/prog/ipc.py" <<'EOF'
# share a CUDA tensor with a child through torch.multiprocessing (CUDA IPC), under PYTORCH_CUDA_ALLOC_CONF
import os, torch, torch.multiprocessing as mp
def child(q):
    t = q.get(timeout=30)
    print("child got", t.sum().item(), flush=True)
if __name__ == "__main__":
    mp.set_start_method("spawn")
    print(f"torch {torch.__version__}; PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF')}", flush=True)
    q = mp.Queue(); p = mp.Process(target=child, args=(q,)); p.start()
    t = torch.ones(1 << 20, device="cuda"); q.put(t); p.join(60)
    print("child exit code", p.exitcode, flush=True)
    raise SystemExit(0 if p.exitcode == 0 else 1)
EOF
cat > "$W/prog/assert.py" <<'EOF'
# an out-of-bounds index on the GPU (device-side assert), then a collective on the poisoned context
import tempfile, torch, torch.distributed as dist
dev = torch.device("cuda:0")
dist.init_process_group("nccl", store=dist.FileStore(tempfile.mktemp(), 1), rank=0, world_size=1, device_id=dev)
x = torch.zeros(10, device=dev)
try:
    y = x[torch.tensor([100], device=dev)]; torch.cuda.synchronize()
except Exception as e:
    print("first error:", repr(e)[:300], flush=True)
dist.all_reduce(x); torch.cuda.synchronize()
EOF
cat > "$W/prog/fork.py" <<'EOF'
import multiprocessing as mp, torch
torch.zeros(1, device="cuda")                    # CUDA initialised in the parent
def child():
    torch.zeros(1, device="cuda")
mp.set_start_method("fork")
p = mp.Process(target=child); p.start(); p.join()
print("child exit code", p.exitcode)
raise SystemExit(p.exitcode or 0)
EOF
cat > "$W/prog/healthy.py" <<'EOF'
import torch
print(f"torch {torch.__version__} cuda {torch.version.cuda} on {torch.cuda.get_device_name(0)}")
a = torch.randn(4096, 4096, device="cuda"); b = a @ a; torch.cuda.synchronize()
print("matmul ok", float(b.norm()) > 0)
EOF

# ---------------------------------------------------------------- running a case
: > "$W/cases.toml"; : > "$W/summary.txt"; n=0
case_() {  # case_ NAME CAUSE TIMEOUT "what it is" -- command... (environment set with env inside the command)
  local name=$1 cause=$2 limit=$3 what=$4; shift 5
  local left=$(( LIMIT - (SECONDS - start) ))
  if [ "$left" -lt $(( limit + 5 )) ]; then echo "$name: not run, $left s left" | tee -a "$W/summary.txt"; return; fi
  local t0=$SECONDS; n=$((n + 1)); local file; file=$(printf "h200-s6-%02d.log" "$n")
  # the log holds only what the programs print: the case and its command are in cases.toml, not in the
  # text explain reads (a header naming the fault would hand it the answer)
  ( cd "$W" && timeout -k 5 "$limit" "$@" ) > "$W/$file" 2>&1
  local rc=$?
  echo "$file $name: exit $rc after $(( SECONDS - t0 )) s (expected cause $cause)" | tee -a "$W/summary.txt"
  cat >> "$W/cases.toml" <<EOT

[[log]]
file = "$file"
source = "docs/gpu-runs/s6-explain-logs.sh"
repository = "envbuild/h200-s6"
project = "envbuild-h200"
cause = "$cause"
established_by = "made on purpose on a 1xH200 node by docs/gpu-runs/s6-explain-logs.sh: $what (exit $rc)"
confidence = "high"
notes = "case $name; a real run; command: $(printf '%s ' "$@" | sed 's/\\/\\\\/g; s/"/\\"/g')"
EOT
}
N="env NCCL_DEBUG=INFO"
{ nvidia-smi; $PY -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())"; echo "system libnccl: ${SYS_NCCL:-none}"; echo "stub libcuda: ${STUB:-none}"; } > "$W/node.txt" 2>&1

# healthy runs: no cause may come out above "low", and the verdict must be ok
case_ healthy-pg1 none 60 "one-rank NCCL all_reduce, nothing wrong" -- $N $PY prog/pg1.py
case_ healthy-matmul none 60 "a matmul with nvidia-smi before it" -- bash -c "nvidia-smi; $PY prog/healthy.py"
case_ healthy-collect-env none 90 "torch.utils.collect_env of the cu130 env (one CUDA major)" -- $PY -m torch.utils.collect_env
case_ healthy-env-set none 60 "one-rank NCCL with NCCL_CUMEM_ENABLE=0 NCCL_P2P_DISABLE=1 set" -- env NCCL_DEBUG=INFO NCCL_CUMEM_ENABLE=0 NCCL_P2P_DISABLE=1 $PY prog/pg1.py
case_ healthy-gloo2 none 60 "two gloo ranks all_reduce on the CPU" -- env MODE=ok $PY -m torch.distributed.run --standalone --nproc-per-node 2 prog/gloo2.py

# faults
case_ cvd-empty-pg C11 60 "CUDA_VISIBLE_DEVICES= (empty) and init_process_group(device_id=cuda:0)" -- env NCCL_DEBUG=INFO CUDA_VISIBLE_DEVICES= $PY prog/pg1.py
case_ cvd-empty-tensor C11 60 "CUDA_VISIBLE_DEVICES= (empty) and a CUDA tensor" -- env CUDA_VISIBLE_DEVICES= $PY prog/tensor.py
case_ cvd-bogus-uuid C11 60 "CUDA_VISIBLE_DEVICES=GPU-00000000-bogus and a CUDA tensor" -- env CUDA_VISIBLE_DEVICES=GPU-00000000-0000-0000-0000-000000000000 $PY prog/tensor.py
case_ bad-ordinal C11 60 "set_device(3) with one GPU visible" -- env CUDA_VISIBLE_DEVICES=0 $PY prog/ordinal.py
if [ -n "$SYS_NCCL" ]; then
  case_ system-nccl-preload C3 60 "LD_PRELOAD=$SYS_NCCL (the system libnccl) under torch's NCCL wheel" -- env NCCL_DEBUG=INFO LD_PRELOAD="$SYS_NCCL" $PY prog/pg1.py
fi
case_ socket-ifname-bad U4 60 "NCCL_SOCKET_IFNAME=nonexistent0" -- env NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=nonexistent0 $PY prog/pg1.py
case_ net-ib-forced U4 60 "NCCL_NET=IB on a node without InfiniBand" -- env NCCL_DEBUG=INFO NCCL_NET=IB $PY prog/pg1.py
case_ bad-nccl-algo U2 60 "NCCL_ALGO=NoSuchAlgo (a bad NCCL_* value)" -- env NCCL_DEBUG=INFO NCCL_ALGO=NoSuchAlgo $PY prog/pg1.py
case_ bad-nccl-proto U2 60 "NCCL_PROTO=Bogus (a bad NCCL_* value)" -- env NCCL_DEBUG=INFO NCCL_PROTO=Bogus $PY prog/pg1.py
case_ oom U3 60 "a 400 GiB tensor on a 141 GiB GPU" -- $PY prog/oom.py
case_ dup-gpu U2 60 "two NCCL ranks on the same GPU (torchrun, both cuda:0)" -- env NCCL_DEBUG=INFO $PY -m torch.distributed.run --standalone --nproc-per-node 2 prog/dupgpu.py
case_ gloo-peer-sigkill U2 60 "rank 1 SIGKILLs itself before the all_reduce (gloo)" -- env MODE=kill $PY -m torch.distributed.run --standalone --nproc-per-node 2 prog/gloo2.py
case_ gloo-timeout U1 75 "rank 1 skips the all_reduce; rank 0 times out after 20 s (gloo)" -- env MODE=skip PG_TIMEOUT=20 $PY -m torch.distributed.run --standalone --nproc-per-node 2 prog/gloo2.py
case_ collective-mismatch U1 60 "ranks all_reduce tensors of different sizes, TORCH_DISTRIBUTED_DEBUG=DETAIL (gloo)" -- env MODE=mismatch TORCH_DISTRIBUTED_DEBUG=DETAIL $PY -m torch.distributed.run --standalone --nproc-per-node 2 prog/gloo2.py
case_ expandable-ipc M3 90 "expandable_segments:True and a CUDA tensor sent to a child over CUDA IPC" -- env NCCL_DEBUG=INFO PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $PY prog/ipc.py
case_ device-assert U2 60 "an out-of-bounds GPU index, then an NCCL all_reduce on the poisoned context" -- env NCCL_DEBUG=INFO $PY prog/assert.py
case_ fork-after-init O4 60 "CUDA used in a child forked after the parent initialised CUDA" -- $PY prog/fork.py
if [ -n "$STUB" ]; then
  case_ stub-libcuda C7 60 "LD_PRELOAD=$STUB (the toolkit's stub libcuda)" -- env NCCL_DEBUG=INFO LD_PRELOAD="$STUB" $PY prog/tensor.py
fi

{ echo "## GPU processes left"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv; } >> "$W/summary.txt" 2>&1
tar -czf "$OUT/s6-explain-logs.tar.gz" -C /tmp s6-explain-logs
cat "$W/node.txt" | tail -4; cat "$W/summary.txt"
echo "elapsed $(( SECONDS - start )) s"
