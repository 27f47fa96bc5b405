/*
 * nocuda.c - a stand-in libcuda.so.1 for machines WITHOUT an NVIDIA driver.
 *
 * The PyPI Legate / cuPyNumeric wheels are CUDA builds: liblegate.so, librealm-legate.so,
 * liblegion-legate.so, libcupynumeric.so and the legate Python extension modules all carry
 * DT_NEEDED libcuda.so.1, so they cannot even be loaded where no driver is installed.
 * This library satisfies that dependency and answers "no device" to everything:
 *
 *   - every driver entry point returns CUDA_ERROR_NO_DEVICE (100); output counts are zeroed;
 *   - cuGetErrorName / cuGetErrorString give a valid static string (never an unset pointer);
 *   - cuGetProcAddress is NOT exported (see below why); dlsym() finds nothing for it.
 *
 * With it, Realm's CUDA module sees cuInit fail and is skipped; Legate runs CPU-only.
 * (The CUDA toolkit's stubs/libcuda.so does NOT work: it exports cuGetProcAddress, which
 * fails, and Realm then aborts on the assertion described below.)
 * Put it on the library path ONLY when no real libcuda.so.1 can be found (e.g. when
 * `ldconfig -p | grep -q 'libcuda.so.1 '` fails and /dev/nvidiactl does not exist).
 * Never install it next to a real driver.
 *
 * The symbol list below is the union of:
 *   nm -D --undefined-only  <all wheel libs that NEED libcuda.so.1> | grep ' cu[A-Z]'
 *   names Realm / Legate look up at run time via dlsym + cuGetProcAddress
 *   (strings librealm-legate.so | sed -n 's/^Could not retrieve symbol \(cu.*\)$/\1/p',
 *    strings liblegate.so | grep '^cu[A-Z]').
 * See gen_symbols.sh to regenerate it.
 *
 * No CUDA headers needed: CUresult is an int-sized enum in the real API.
 * All "no device" entry points are defined without parameters; callers pass arguments in
 * registers / caller-cleaned stack on the x86-64 SysV and AArch64 ABIs, so ignoring them is
 * safe there.  Entry points that return data through pointers are written out explicitly.
 */
#include <stddef.h>

typedef int CUresult;
typedef int CUdevice;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_NOT_FOUND 500

#define NOCUDA_EXPORT __attribute__((visibility("default")))

/* ---- entry points that write results ------------------------------------------------ */

NOCUDA_EXPORT CUresult cuInit(unsigned int flags)
{
  (void)flags;
  return CUDA_ERROR_NO_DEVICE;
}

NOCUDA_EXPORT CUresult cuDriverGetVersion(int* version)
{
  if (version) *version = 0;
  return CUDA_ERROR_NO_DEVICE;
}

NOCUDA_EXPORT CUresult cuDeviceGetCount(int* count)
{
  if (count) *count = 0;
  return CUDA_ERROR_NO_DEVICE;
}

NOCUDA_EXPORT CUresult cuDeviceGet(CUdevice* dev, int ordinal)
{
  (void)ordinal;
  if (dev) *dev = -1;
  return CUDA_ERROR_NO_DEVICE;
}

static const char* nocuda_name(CUresult e)
{
  switch (e) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    default: return "CUDA_ERROR_UNKNOWN";
  }
}

static const char* nocuda_string(CUresult e)
{
  switch (e) {
    case CUDA_SUCCESS: return "no error";
    case CUDA_ERROR_NO_DEVICE: return "no CUDA-capable device is detected (nocuda stand-in driver)";
    case CUDA_ERROR_NOT_FOUND: return "named symbol not found (nocuda stand-in driver)";
    default: return "unknown error (nocuda stand-in driver: no NVIDIA driver installed)";
  }
}

NOCUDA_EXPORT CUresult cuGetErrorName(CUresult error, const char** str)
{
  if (!str) return CUDA_ERROR_INVALID_VALUE;
  *str = nocuda_name(error);
  return CUDA_SUCCESS;
}

NOCUDA_EXPORT CUresult cuGetErrorString(CUresult error, const char** str)
{
  if (!str) return CUDA_ERROR_INVALID_VALUE;
  *str = nocuda_string(error);
  return CUDA_SUCCESS;
}

/* cuGetProcAddress / cuGetProcAddress_v2 are deliberately NOT exported.
 * Realm (cuda_module.cc, resolve_cuda_api_fnptrs) dlsym()s "cuGetProcAddress" and, if found,
 * fetches every entry point through it; a NOT_FOUND answer there makes Realm report the error
 * through a still-null cuGetErrorName pointer and abort
 * (assertion `Realm::Cuda::cuGetErrorName_fnptr != nullptr' failed, checked with legate 26.06.01).
 * Without cuGetProcAddress, Realm falls back to dlsym() of each name, finds the "no device"
 * functions below, calls cuInit -> 100, and starts without its CUDA module.  No caller ever
 * gets a pointer from this library other than one of its own exported functions. */

/* ---- every other entry point: "no device" --------------------------------------------- */

#define NOCUDA_NODEV(name) \
  NOCUDA_EXPORT CUresult name(void) { return CUDA_ERROR_NO_DEVICE; }

/* BEGIN GENERATED SYMBOLS (gen_symbols.sh) */
#define NOCUDA_SYMBOLS(X) \
  X(cuArray3DCreate) X(cuArrayDestroy) X(cuArrayGetMemoryRequirements) \
  X(cuCtxEnablePeerAccess) X(cuCtxGetCurrent) X(cuCtxGetDevice) X(cuCtxGetFlags) \
  X(cuCtxGetLimit) X(cuCtxGetStreamPriorityRange) X(cuCtxPopCurrent) X(cuCtxPopCurrent_v2) \
  X(cuCtxPushCurrent) X(cuCtxPushCurrent_v2) X(cuCtxRecordEvent) X(cuCtxSetCacheConfig) \
  X(cuCtxSetLimit) X(cuCtxSetSharedMemConfig) X(cuCtxSynchronize) X(cuDeviceCanAccessPeer) \
  X(cuDeviceGetAttribute) X(cuDeviceGetName) X(cuDeviceGetUuid) \
  X(cuDevicePrimaryCtxRelease) X(cuDevicePrimaryCtxRelease_v2) X(cuDevicePrimaryCtxRetain) \
  X(cuDevicePrimaryCtxSetFlags) X(cuDeviceTotalMem) X(cuEventCreate) X(cuEventDestroy) \
  X(cuEventElapsedTime) X(cuEventQuery) X(cuEventRecord) X(cuEventSynchronize) \
  X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuFuncSetCacheConfig) \
  X(cuFuncSetSharedMemConfig) X(cuIpcCloseMemHandle) X(cuIpcGetMemHandle) \
  X(cuIpcOpenMemHandle) X(cuKernelGetFunction) X(cuLaunchCooperativeKernel) \
  X(cuLaunchHostFunc) X(cuLaunchKernel) X(cuLibraryGetKernel) X(cuLibraryLoadData) \
  X(cuLibraryUnload) X(cuMemAddressFree) X(cuMemAddressReserve) X(cuMemAdvise) X(cuMemAlloc) \
  X(cuMemAllocAsync) X(cuMemAllocHost) X(cuMemAllocManaged) X(cuMemCreate) \
  X(cuMemExportToShareableHandle) X(cuMemFree) X(cuMemFreeAsync) X(cuMemFreeHost) \
  X(cuMemFree_v2) X(cuMemGetAddressRange) X(cuMemGetAddressRange_v2) \
  X(cuMemGetAllocationGranularity) X(cuMemGetAllocationPropertiesFromHandle) X(cuMemGetInfo) \
  X(cuMemHostAlloc) X(cuMemHostGetDevicePointer) X(cuMemHostRegister) X(cuMemHostUnregister) \
  X(cuMemImportFromShareableHandle) X(cuMemMap) X(cuMemPrefetchAsync) X(cuMemRelease) \
  X(cuMemSetAccess) X(cuMemUnmap) X(cuMemcpy2DAsync) X(cuMemcpy3DAsync) X(cuMemcpyAsync) \
  X(cuMemcpyDtoDAsync) X(cuMemcpyDtoH) X(cuMemcpyDtoHAsync) X(cuMemcpyDtoHAsync_v2) \
  X(cuMemcpyHtoD) X(cuMemcpyHtoDAsync) X(cuMemcpyHtoDAsync_v2) X(cuMemsetD16Async) \
  X(cuMemsetD2D16Async) X(cuMemsetD2D32Async) X(cuMemsetD2D8Async) X(cuMemsetD32Async) \
  X(cuMemsetD8Async) X(cuModuleGetFunction) X(cuModuleGetGlobal) X(cuModuleLoadDataEx) \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor) \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags) X(cuOccupancyMaxPotentialBlockSize) \
  X(cuOccupancyMaxPotentialBlockSizeWithFlags) X(cuPointerGetAttribute) \
  X(cuPointerGetAttributes) X(cuStreamAddCallback) X(cuStreamCreate) \
  X(cuStreamCreateWithPriority) X(cuStreamDestroy) X(cuStreamDestroy_v2) X(cuStreamQuery) \
  X(cuStreamSynchronize) X(cuStreamWaitEvent) X(cuSurfObjectCreate) X(cuSurfObjectDestroy)
/* END GENERATED SYMBOLS */

NOCUDA_SYMBOLS(NOCUDA_NODEV)
