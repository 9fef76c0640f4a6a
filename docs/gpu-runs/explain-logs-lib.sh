# Shared by docs/gpu-runs/s20-explain-logs.sh and s21-explain-logs.sh (sourced, with RUN set): the work folder, the
# node facts and `case_`, which runs one case under a timeout into gpu-$RUN-NN.log and appends its manifest entry
# to cases.toml; `finish_` packs the run into $OUT/$RUN-explain-logs.tar.gz.
: "${RUN:?set RUN before sourcing}"
OUT=${OUT:?set OUT}
LIMIT=${LIMIT:-480}            # seconds for the whole script (the call is limited to 10 min)
PY=${PYTHON:-python3}
W=/tmp/$RUN-explain-logs; rm -rf "$W"; mkdir -p "$W"
cp -r "$(dirname "${BASH_SOURCE[0]}")/explain-progs" "$W/prog"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
start=$SECONDS
STUB=$(ls /usr/local/cuda/lib64/stubs/libcuda.so /usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so 2>/dev/null | head -1)
COMPAT=$(ls /usr/local/cuda/compat/libcuda.so.1 /usr/local/cuda-*/compat/libcuda.so.1 2>/dev/null | head -1)
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)

_toml() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g'; }  # the inside of a TOML basic string
: > "$W/cases.toml"; : > "$W/summary.txt"; n=0
case_() {  # case_ NAME CAUSE TIMEOUT "what it is" -- command...   (environment set with env inside the command)
  local name=$1 cause=$2 limit=$3 what=$4; shift 5
  local left=$(( LIMIT - (SECONDS - start) ))
  if [ "$left" -lt $(( limit + 5 )) ]; then echo "$name: not run, $left s left" | tee -a "$W/summary.txt"; return; fi
  local t0=$SECONDS; n=$((n + 1)); local file; file=$(printf "gpu-$RUN-%02d.log" "$n")
  # the log holds only what the programs print: the case and its command are in cases.toml, not in the text
  # explain reads (a header naming the fault would hand it the answer)
  # each case in a session of its own, so that whatever it left behind goes with its process group; torchrun's
  # workers start sessions of their own, so the programs are also ended by name
  ( cd "$W" && exec setsid timeout -k 5 "$limit" "$@" ) > "$W/$file" 2>&1 &
  local pgid=$!
  wait "$pgid"
  local rc=$?
  kill -9 -- "-$pgid" 2>/dev/null
  pkill -9 -f " prog/[a-z0-9_]+\.py" 2>/dev/null
  echo "$file $name: exit $rc after $(( SECONDS - t0 )) s (expected cause $cause)" | tee -a "$W/summary.txt"
  cat >> "$W/cases.toml" <<EOT

[[log]]
file = "$file"
source = "docs/gpu-runs/$RUN-explain-logs.sh"
repository = "envbuild/gpu-$RUN"
project = "envbuild-gpu"
cause = "$cause"
established_by = "made on purpose on a lent 1x$(_toml "$GPU") node by docs/gpu-runs/$RUN-explain-logs.sh: $(_toml "$what") (exit $rc)"
confidence = "high"
notes = "case $name; a real run; command: $(_toml "$(printf '%s ' "$@")")"
EOT
}
N="env NCCL_DEBUG=INFO"
TR="$PY -m torch.distributed.run --standalone --nproc-per-node 2"
{ nvidia-smi; $PY -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())"
  echo "stub libcuda: ${STUB:-none}"; echo "compat libcuda: ${COMPAT:-none}"; ulimit -a; df -h /dev/shm; } > "$W/node.txt" 2>&1


finish_() {
  { echo "## GPU processes left"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv; echo "## processes left"; pgrep -af "prog/" || echo none; } >> "$W/summary.txt" 2>&1
  # only what the corpus takes: the programs' own files (checkpoints, outputs) can be larger than a call brings back
  ( cd /tmp && tar -czf "$OUT/$RUN-explain-logs.tar.gz" "$RUN-explain-logs"/gpu-"$RUN"-*.log \
      "$RUN-explain-logs"/{cases.toml,summary.txt,node.txt} )
  tail -6 "$W/node.txt"; cat "$W/summary.txt"
  echo "elapsed $(( SECONDS - start )) s"
}
