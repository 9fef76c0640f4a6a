# An RL step that scores its samples in a pool of reward workers (ProcessPoolExecutor, fork) after the policy
# ran on the GPU.
import concurrent.futures as cf
import multiprocessing

import torch

policy = torch.nn.Linear(64, 16).cuda()
samples = policy(torch.randn(32, 64, device="cuda")).argmax(dim=1).tolist()
print(f"torch {torch.__version__}; {len(samples)} samples from the policy", flush=True)


def reward(token):
    t = torch.tensor([token], dtype=torch.float32, device="cuda")
    return float((t - 8).abs().neg().item())


if __name__ == "__main__":
    with cf.ProcessPoolExecutor(max_workers=4, mp_context=multiprocessing.get_context("fork")) as pool:
        rewards = list(pool.map(reward, samples))
    print("mean reward", sum(rewards) / len(rewards), flush=True)
