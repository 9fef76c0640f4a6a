#!/usr/bin/env bash
# The GPU run behind tests/fixtures/bundles/h200x2 and docs/gpu-runs/node-*.json (engineer H1, issue 2).
# Run on the lent 2xH200 machine from the repository root: `bash docs/gpu-runs/node-capture.sh`, with $OUT set.
# It captures the node bundle, runs the static doctor live, replays the bundle on the same machine, and
# saves nvidia-smi -q plus a few raw readings for reference. Nothing here changes the node.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
OUT=${OUT:?set OUT}
B=/tmp/envbuild-bundle/h200x2
rm -rf /tmp/envbuild-bundle && mkdir -p /tmp/envbuild-bundle
nvidia-smi -q > "$OUT/nvidia-smi-q.txt" 2>&1
{
  echo "## capture"; /usr/bin/time -f "capture wall %e s" timeout 120 python3 -m envbuild capture --node "$B"; echo "rc=$?"
  R=(); [ -f envbuild/report/junit.py ] && R+=(--junit "$OUT/node-doctor-static.junit.xml")
  [ -f envbuild/report/prometheus.py ] && R+=(--prometheus "$OUT/node-doctor-static.prom")
  echo "## doctor (live, static)"
  /usr/bin/time -f "doctor wall %e s" timeout 120 python3 -m envbuild doctor --json "$OUT/node-doctor-static.json" "${R[@]}"; echo "rc=$?"
  echo "## doctor --root (replay on the node)"
  timeout 60 python3 -m envbuild doctor --root "$B" -q --json "$OUT/node-doctor-replay-on-node.json"; echo "rc=$?"
} > "$OUT/node-run.log" 2>&1
{
  for c in "uname -a" "cat /proc/driver/nvidia/version" "ls -l /dev/nvidia*" "grep -r . /sys/module/nvidia_uvm/parameters" \
           "ulimit -a" "df -P /dev/shm" "cat /proc/cmdline" "ls /sys/class/iommu" "nvidia-smi topo -m" \
           "nvidia-smi topo -p2p r" "which journalctl dmesg lspci systemctl nv-fabricmanager ldconfig" "id"; do
    echo "### $c"; timeout 20 bash -c "$c" 2>&1 | head -60
  done
} > "$OUT/node-raw.txt"
tar czf "$OUT/h200x2-bundle.tgz" -C /tmp/envbuild-bundle h200x2
du -sh "$B" >> "$OUT/node-run.log"
cat "$OUT/node-run.log"
