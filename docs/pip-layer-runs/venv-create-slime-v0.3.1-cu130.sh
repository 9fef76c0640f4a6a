set -x
E=/work/wt/uv/.venv/bin/envbuild
export ENVBUILD_CACHE_DIR=/tmp/uvx/realrun/cache COLUMNS=200
python3 --version; /root/.pyenv/versions/3.12.1/bin/python --version
time $E create --profile slime-v0.3.1-cu130 --lockfiles /tmp/uvx/real --backend venv --python /root/.pyenv/versions/3.12.1/bin/python --prefix /tmp/uvx/realrun/env
echo "create rc=$?"
time $E doctor --prefix /tmp/uvx/realrun/env --profile slime-v0.3.1-cu130 --lockfiles /tmp/uvx/real --json /tmp/uvx/realrun/doctor.json
echo "doctor rc=$?"
/tmp/uvx/realrun/env/bin/python -c "import torch, transformers, numpy, scipy, ray; print(torch.__version__, torch.version.cuda, transformers.__version__, numpy.__version__, ray.__version__)"
bash -c '. /tmp/uvx/realrun/env/bin/activate && echo CUDNN_PATH=$CUDNN_PATH NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE'
du -sh /tmp/uvx/realrun/env
