# Per-rank GPU binding for torchrun --no-python: each local rank sees one GPU, picked from LOCAL_RANK modulo
# GPUS_PER_NODE (set by the job script), then the command runs.
gpu=$(( LOCAL_RANK % ${GPUS_PER_NODE:-1} ))
export CUDA_VISIBLE_DEVICES=$gpu
echo "[rank_gpu] rank $RANK local_rank $LOCAL_RANK on ${HOSTNAME:-$(uname -n)}: CUDA_VISIBLE_DEVICES=$gpu (GPUS_PER_NODE=${GPUS_PER_NODE:-1})"
exec "$@"
