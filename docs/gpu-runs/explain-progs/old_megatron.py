# GPT pretraining driven by a pinned, older Megatron-LM checkout on PYTHONPATH (the job's requirements pin the
# checkout, the image brings a newer torch). The script builds its model, then imports Megatron's optimizer helpers.
import os

import torch

print("using world size: 1, data-parallel size: 1, tensor-model-parallel size: 1, pipeline-model-parallel size: 1",
      flush=True)
print(f"> torch {torch.__version__}, device {torch.cuda.get_device_name(0)}", flush=True)
print("> building GPT model ...", flush=True)
model = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True), 4).cuda()
print(f" > number of parameters on (tensor, pipeline) model parallel rank (0, 0): "
      f"{sum(p.numel() for p in model.parameters())}", flush=True)
print(f"> setting up optimizer from megatron ({os.environ.get('MEGATRON_PATH', 'PYTHONPATH')}) ...", flush=True)
from megatron.optimizer import get_megatron_optimizer  # noqa: E402

opt = get_megatron_optimizer(model)
