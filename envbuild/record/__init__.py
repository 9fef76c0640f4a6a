"""`envbuild record`: per-process evidence of a Ray job, written while it runs (issue 22).

doctor judges the node before a run and explain reads the log after; error 999 is born in between, inside the
run's own processes, and that evidence dies with them. One change to the job's runtime env (Ray's
worker_process_setup_hook plus ENVBUILD_RECORD_DIR, `envbuild record env`) makes every Ray worker, and every
Python process those workers start (through a sitecustomize.py on the PYTHONPATH they inherit), record into a run
directory: the mapped CUDA/NCCL libraries, the steering variables, NCCL's own warnings, PyTorch's flight recorder,
fatal-signal and hang stacks, and at the first failure the exception, the GPU memory and the kernel's Xid lines.
The layout is docs/record.md; hook.py is the part that runs inside the job (standard library only at start).
"""
