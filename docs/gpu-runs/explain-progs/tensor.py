# One CUDA tensor: the smallest program that needs a working driver.
import torch

print(f"torch {torch.__version__}; torch.cuda.is_available() {torch.cuda.is_available()}")
x = torch.zeros(1).cuda()
print("ok", x)
