"""PyTorch under libprism-vgpu with a memory limit (run by tools/gpu-check/run.sh).

Expects LD_PRELOAD=libprism-vgpu.so and CUDA_DEVICE_MEMORY_LIMIT in the environment, and
PRISM_CHECK_LIMIT_BYTES holding the same limit in bytes. Prints one "key=value" line per fact and
exits 0 only if: torch.cuda.mem_get_info() reports the limit as total, an allocation that fits
succeeds, and one that would exceed the limit raises torch.OutOfMemoryError.
"""
import os
import sys

import torch

GiB = 1 << 30


def main() -> int:
    limit = int(os.environ["PRISM_CHECK_LIMIT_BYTES"])
    if not torch.cuda.is_available():
        print("error=cuda_not_available")
        return 1
    torch.cuda.init()
    free, total = torch.cuda.mem_get_info()
    print(f"mem_get_info_free={free}")
    print(f"mem_get_info_total={total}")
    print(f"device_total={torch.cuda.get_device_properties(0).total_memory}")
    ok = total == limit
    fits = torch.empty(limit - GiB, dtype=torch.uint8, device="cuda")  # 1 GiB of headroom.
    torch.cuda.synchronize()
    free_after, _ = torch.cuda.mem_get_info()
    print(f"allocated_bytes={fits.numel()}")
    print(f"free_after_allocation={free_after}")
    try:
        too_much = torch.empty(2 * GiB, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        print(f"over_limit_allocation=succeeded bytes={too_much.numel()}")
        ok = False
    except torch.OutOfMemoryError as error:
        print("over_limit_allocation=out_of_memory")
        print("oom_message=" + str(error).splitlines()[0][:160])
    del fits
    torch.cuda.empty_cache()
    print(f"result={'pass' if ok else 'fail'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
