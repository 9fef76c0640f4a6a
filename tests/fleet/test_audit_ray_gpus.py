"""fleet.audit_env on a GPU Ray worker: Ray sets CUDA_VISIBLE_DEVICES to the GPUs it assigned the worker, which
is no difference the user made (the first GPU run warned about it: docs/gpu-runs, session 4); any other value
still is."""
from envbuild.fleet.audit import check_process


def env_result(worker_env, shell_env, ray_gpu_ids):
    audit = {"env": worker_env, "libraries": {}, "kernel_module": None, "ray_gpu_ids": ray_gpu_ids}
    return [r for r in check_process(audit, {"env": shell_env}) if r.check_id == "fleet.audit_env"][0]


def test_ray_assigned_gpus_are_not_a_difference():
    r = env_result({"CUDA_VISIBLE_DEVICES": "0"}, {}, ["0"])
    assert r.status.value == "pass", r.summary
    assert "the GPUs Ray assigned this worker" in r.summary


def test_a_visible_devices_value_ray_did_not_assign_still_warns():
    r = env_result({"CUDA_VISIBLE_DEVICES": "0,1"}, {}, ["1"])
    assert r.status.value == "warn" and "CUDA_VISIBLE_DEVICES" in r.summary
    r = env_result({"CUDA_VISIBLE_DEVICES": "0", "NCCL_P2P_DISABLE": "1"}, {}, None)  # not a Ray worker: compared
    assert r.status.value == "warn" and "2 variable(s)" in r.summary
