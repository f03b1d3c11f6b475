// The CUDA driver API, loaded at run time (docs/cuda.md). _C links no CUDA
// library and includes no CUDA header, so it builds on machines without a
// CUDA toolkit; the GPU path works wherever libcuda.so.1 (the driver) loads.
#pragma once

#include <cstddef>
#include <string>

namespace coreai_torch::cuda {

// The driver's types and the few enumerators the backend passes, with the
// values of the driver's ABI (cuda.h). Enumerations are int-sized there.
using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUlinkState = struct CUlinkState_st*;

constexpr CUresult kCudaSuccess = 0;
constexpr int kJitInfoLogBuffer = 3;
constexpr int kJitInfoLogBufferSizeBytes = 4;
constexpr int kJitErrorLogBuffer = 5;
constexpr int kJitErrorLogBufferSizeBytes = 6;
constexpr int kJitInputPtx = 1;
constexpr int kFuncAttributeMaxThreadsPerBlock = 0;
constexpr int kFuncAttributeSharedSizeBytes = 1;
constexpr int kFuncAttributeLocalSizeBytes = 3;
constexpr int kFuncAttributeNumRegs = 4;
constexpr int kDeviceAttributeComputeCapabilityMajor = 75;
constexpr int kDeviceAttributeComputeCapabilityMinor = 76;

// The entry points the backend calls, as the CUDA 12.0 ABI defines them.
struct Driver {
  int version = 0;  // cuDriverGetVersion: 1000 * major + 10 * minor
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuCtxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*cuModuleUnload)(CUmodule) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*cuFuncGetAttribute)(int*, int, CUfunction) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void**, void**) = nullptr;
  CUresult (*cuLinkCreate)(unsigned, int*, void**, CUlinkState*) = nullptr;
  CUresult (*cuLinkAddData)(CUlinkState, int, void*, size_t, const char*, unsigned, int*,
                            void**) = nullptr;
  CUresult (*cuLinkComplete)(CUlinkState, void**, size_t*) = nullptr;
  CUresult (*cuLinkDestroy)(CUlinkState) = nullptr;
};

// The driver, loaded and initialised on first use. Throws a c10::Error that
// says what is missing when it cannot be loaded.
const Driver& driver();

// Makes the primary context of `device` (the one PyTorch's runtime uses)
// current on this thread; it is retained once per device for the process.
void make_primary_context_current(int device);

// "CUDA_ERROR_NAME (description)" for a driver result.
std::string describe(CUresult result);

// Throws a c10::Error "<what> failed: <describe(result)>" unless `result` is
// success.
void check(CUresult result, const std::string& what);

}  // namespace coreai_torch::cuda
