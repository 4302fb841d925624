//===- OpKernelDevices.cpp - Where kiln-op-kernel-check launches ----------===//

#include "OpKernelDevices.h"

#include "HostShim.h"

#ifdef KILN_HAVE_CUDA
#include "kiln/Runtime/Cuda/KernelCompiler.h"
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <cstring>

namespace kiln::runtime::opcheck {

namespace {

/// Resolves a launch's slots against the steps' buffers, whose storage
/// `i` is at `base[i]`.
std::vector<uint64_t> slotsOf(const cuda::OpKernelLaunch &l, const Buffers &b,
                              const std::vector<char *> &base, char *scratch) {
  std::vector<uint64_t> slots(l.slots, 0);
  for (size_t i = 0; i < l.args.size(); ++i) {
    const cuda::OpKernelArg &a = l.args[i];
    switch (a.kind) {
    case cuda::OpKernelArg::Operand:
      slots[i] = reinterpret_cast<uint64_t>(
          base[b.operands.at(a.step).at(a.index)]);
      break;
    case cuda::OpKernelArg::Result:
      slots[i] = reinterpret_cast<uint64_t>(
          base[b.results.at(a.step).at(a.index)]);
      break;
    case cuda::OpKernelArg::Scratch:
      slots[i] = reinterpret_cast<uint64_t>(scratch + a.index);
      break;
    case cuda::OpKernelArg::Int:
      slots[i] = static_cast<uint64_t>(a.i);
      break;
    case cuda::OpKernelArg::Float:
      std::memcpy(&slots[i], &a.f, 8);
      break;
    }
  }
  return slots;
}

using HostLaunchFn = void (*)(void *, unsigned, unsigned, size_t,
                              const uint64_t *, int);

// The check's entry point, after the library's source.
const char *kHostLaunch = R"(
extern "C" void kiln_host_launch_op(void *kernel, unsigned grid,
                                    unsigned block, size_t shared,
                                    const unsigned long long *slots,
                                    int list) {
  if (list) {
    KilnOpListArgs a;
    std::memcpy(&a, slots, sizeof a);
    void (*fn)(KilnOpListArgs) = (void (*)(KilnOpListArgs))kernel;
    kiln_host_grid(grid, block, shared, [&a, fn] { fn(a); });
    return;
  }
  KilnOpArgs a;
  std::memcpy(&a, slots, sizeof a);
  void (*fn)(KilnOpArgs) = (void (*)(KilnOpArgs))kernel;
  kiln_host_grid(grid, block, shared, [&a, fn] { fn(a); });
}
)";

class HostDevice final : public Device {
public:
  Error open(const std::string &dir) {
    Expected<std::unique_ptr<hostshim::HostLibrary>> compiled =
        hostshim::HostLibrary::compile(cuda::opKernelLibrarySource(),
                                       kHostLaunch, dir + "/ops");
    if (!compiled)
      return compiled.takeError();
    lib = std::move(*compiled);
    launchFn =
        reinterpret_cast<HostLaunchFn>(lib->symbol("kiln_host_launch_op"));
    return Error::success();
  }
  bool onGpu() const override { return false; }
  Error run(const cuda::OpLaunchPlan &p, Buffers &b) override {
    std::vector<char *> base;
    for (auto &s : b.storage)
      base.push_back(reinterpret_cast<char *>(s.data()));
    for (int r : p.zeroResults)
      std::fill(b.storage[b.results[0][r]].begin(),
                b.storage[b.results[0][r]].end(), 0);
    std::vector<double> scratch((p.scratchBytes + 7) / 8 + 1, 0.0);
    for (const cuda::OpKernelLaunch &l : p.launches) {
      void *kernel = lib->symbol(l.kernel);
      if (!kernel)
        return Error("no kernel '" + l.kernel + "' in the library");
      std::vector<uint64_t> slots =
          slotsOf(l, b, base, reinterpret_cast<char *>(scratch.data()));
      launchFn(kernel, static_cast<unsigned>(l.grid),
               static_cast<unsigned>(l.block), l.sharedBytes, slots.data(),
               l.slots == cuda::kMaxOpKernelListArgs);
    }
    return Error::success();
  }

private:
  std::unique_ptr<hostshim::HostLibrary> lib;
  HostLaunchFn launchFn = nullptr;
};

#ifdef KILN_HAVE_CUDA
std::string cudaText(cudaError_t e) { return cudaGetErrorString(e); }

class GpuDevice final : public Device {
public:
  /// Success when GPU 0 runs the compiled library, else why not.
  Error open(bool &skip) {
    Expected<std::string> a = cuda::deviceKernelArch(0);
    skip = !a;
    if (!a)
      return a.takeError();
    std::string arch = *a;
    Expected<cuda::CompiledKernel> cubin = cuda::compileKernel(
        cuda::opKernelLibrarySource(), arch, cuda::defaultKernelCacheDir(),
        cuda::Arithmetic::Exact);
    if (!cubin)
      return Error("the op kernels do not compile for " + arch + ": " +
                   cubin.error().message());
    if (cudaError_t e = cudaLibraryLoadData(&lib, cubin->cubin.data(), nullptr,
                                            nullptr, 0, nullptr, nullptr, 0);
        e != cudaSuccess)
      return Error("loading the CUBIN: " + cudaText(e));
    return Error::success();
  }
  bool onGpu() const override { return true; }
  Error run(const cuda::OpLaunchPlan &p, Buffers &b) override {
    std::vector<void *> device(b.storage.size(), nullptr);
    void *scratch = nullptr;
    auto release = [&] {
      for (void *d : device)
        cudaFree(d);
      cudaFree(scratch);
    };
    auto fail = [&](const std::string &what, cudaError_t e) {
      release();
      return Error(what + ": " + cudaText(e));
    };
    for (size_t i = 0; i < b.storage.size(); ++i) {
      if (cudaError_t e = cudaMalloc(&device[i], b.storage[i].size() + 1);
          e != cudaSuccess)
        return fail("cudaMalloc", e);
      cudaMemcpy(device[i], b.storage[i].data(), b.storage[i].size(),
                 cudaMemcpyHostToDevice);
    }
    if (cudaError_t e = cudaMalloc(&scratch, p.scratchBytes + 1);
        e != cudaSuccess)
      return fail("cudaMalloc", e);
    cudaMemset(scratch, 0, p.scratchBytes + 1);
    std::vector<char *> base;
    for (void *d : device)
      base.push_back(static_cast<char *>(d));
    for (int r : p.zeroResults)
      cudaMemset(base[b.results[0][r]], 0, b.storage[b.results[0][r]].size());
    for (const cuda::OpKernelLaunch &l : p.launches) {
      cudaKernel_t kernel;
      if (cudaError_t e =
              cudaLibraryGetKernel(&kernel, lib, l.kernel.c_str());
          e != cudaSuccess)
        return fail(l.kernel, e);
      std::vector<uint64_t> slots =
          slotsOf(l, b, base, static_cast<char *>(scratch));
      void *params[] = {slots.data()};
      if (cudaError_t e = cudaLaunchKernel(
              reinterpret_cast<const void *>(kernel),
              dim3(static_cast<unsigned>(l.grid)), dim3(l.block), params,
              l.sharedBytes, nullptr);
          e != cudaSuccess)
        return fail("launching " + l.kernel, e);
    }
    if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess)
      return fail("running the kernels", e);
    for (size_t i = 0; i < b.storage.size(); ++i)
      cudaMemcpy(b.storage[i].data(), device[i], b.storage[i].size(),
                 cudaMemcpyDeviceToHost);
    release();
    return Error::success();
  }

private:
  cudaLibrary_t lib = nullptr;
};
#endif

} // namespace

Expected<std::unique_ptr<Device>> openHostDevice(const std::string &dir) {
  auto host = std::make_unique<HostDevice>();
  if (Error e = host->open(dir))
    return e;
  return std::unique_ptr<Device>(std::move(host));
}

Expected<std::unique_ptr<Device>> openGpuDevice(bool &skip) {
#ifdef KILN_HAVE_CUDA
  auto gpu = std::make_unique<GpuDevice>();
  if (Error e = gpu->open(skip))
    return e;
  return std::unique_ptr<Device>(std::move(gpu));
#else
  skip = true;
  return Error("this build has no CUDA backend");
#endif
}

} // namespace kiln::runtime::opcheck
