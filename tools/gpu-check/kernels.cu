// Kernels for tools/gpu-check, loaded by prism_vgpu_probe with cuModuleLoad. Their semantics
// match the fake driver's (src/intercept/fake/fake_cuda.cc), so the probe's commands mean the
// same on a real GPU and in the GPU-free tests.

// Does nothing: a launch costs only the launch.
extern "C" __global__ void prism_empty() {}

// Keeps its SM busy with FMAs for `ns` nanoseconds (GPU global timer), so one wave of blocks
// takes `ns` whatever the GPU: compute-bound and of known duration.
extern "C" __global__ void prism_spin(unsigned long long ns) {
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  float x = threadIdx.x * 0.5f + 1.0f;
  float y = blockIdx.x * 0.25f + 1.0f;
  for (;;) {
#pragma unroll
    for (int i = 0; i < 256; ++i) {
      x = fmaf(x, 0.9999f, y);
      y = fmaf(y, 0.9999f, x);
    }
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start >= ns) break;
  }
  if (x == 1234.5f && y == 6789.0f) asm volatile("trap;");  // Keeps the FMAs alive.
}
