# A Dataset that touches CUDA in __getitem__, read by forked DataLoader workers after the parent used CUDA.
import torch
from torch.utils.data import DataLoader, Dataset


class OnGpu(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.full((4,), float(i), device="cuda")


print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}", flush=True)
for batch in DataLoader(OnGpu(), batch_size=8, num_workers=2):
    print("batch", batch.shape, flush=True)
