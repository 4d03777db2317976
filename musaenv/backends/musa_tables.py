"""CUDA -> MUSA mapping tables of :mod:`musaenv.backends.musa_port` (data only; sources and certainty: docs/musa.md)."""

from __future__ import annotations

import re

# ------------------------------------------------------------------------------------------- mapping tables
# Sources (details and certainty in docs/musa.md): torch_musa torch_musa/utils/mapping/{include,general,
# extra,dnn-header,dnn-naming}.json and utils/README.md; torch_musa csrc/core/MUSA{Stream,Guard}.h and
# csrc/aten/musa/MUSAContext.h; torch_musa utils/musa_extension.py (load_inline signature); MooreThreads/torchada
# src/torchada/_mappings/{aten,c10,device,data_types}.py.

# CUDA header -> (MUSA header, always write with quotes as torch_musa's README does).
INCLUDES: dict[str, tuple[str, bool]] = {
    "cuda.h": ("musa.h", False),
    "cuda_runtime.h": ("musa_runtime.h", False),
    "cuda_runtime_api.h": ("musa_runtime_api.h", False),
    "cuda_fp16.h": ("musa_fp16.h", False),
    "cuda_bf16.h": ("musa_bf16.h", False),
    "cuda_fp8.h": ("musa_fp8.h", False),
    "cublas_v2.h": ("mublas.h", False),
    "cublas.h": ("mublas.h", False),
    "cublasLt.h": ("mublasLt.h", False),
    "curand.h": ("murand.h", False),
    "curand_kernel.h": ("murand_kernel.h", False),
    "cufft.h": ("mufft.h", False),
    "cusparse.h": ("musparse.h", False),
    "cusolverDn.h": ("musolverDn.h", False),
    "cudnn.h": ("mudnn.h", False),
    "ATen/cuda/CUDAContext.h": ("torch_musa/csrc/aten/musa/MUSAContext.h", True),
    "ATen/cuda/Exceptions.h": ("torch_musa/csrc/aten/musa/Exceptions.h", True),
    "ATen/cuda/CUDAEvent.h": ("torch_musa/csrc/core/MUSAEvent.h", True),
    "c10/cuda/CUDAGuard.h": ("torch_musa/csrc/core/MUSAGuard.h", True),
    "c10/cuda/CUDAStream.h": ("torch_musa/csrc/core/MUSAStream.h", True),
    "c10/cuda/CUDAException.h": ("torch_musa/csrc/core/MUSAException.h", True),
}
INCLUDE_WARN = re.compile(
    r"(ATen/cuda/|c10/cuda/|cuda/|cub/|thrust/|cutlass/|cute/|nvtx|mma\.h|cooperative_groups|cu\w*\.h|nv\w*\.h"
    r"|device_launch_parameters\.h)"
)

# CUDA runtime names renamed cudaX -> musaX (torch_musa general.json maps the whole runtime that way). A list,
# not a prefix rule, so unknown cuda* identifiers (user names) are warned about, never renamed; every name is
# checked against the CUDA toolkit headers by tests/unit/backends/test_musa_port.py when a toolkit is present.
CUDA_RUNTIME_WORDS = """
    cudaMalloc cudaMallocAsync cudaMallocHost cudaMallocManaged cudaMallocPitch cudaFree cudaFreeAsync
    cudaFreeHost cudaMemcpy cudaMemcpyAsync cudaMemcpy2D cudaMemcpy2DAsync cudaMemcpyToSymbol
    cudaMemcpyFromSymbol cudaMemcpyToSymbolAsync cudaMemcpyFromSymbolAsync cudaMemcpyPeer cudaMemcpyPeerAsync
    cudaMemcpyKind cudaMemcpyHostToDevice cudaMemcpyDeviceToHost cudaMemcpyDeviceToDevice cudaMemcpyHostToHost
    cudaMemcpyDefault cudaMemset cudaMemsetAsync cudaMemset2D cudaMemGetInfo cudaHostAlloc cudaHostRegister
    cudaHostUnregister cudaHostGetDevicePointer cudaPointerGetAttributes cudaPointerAttributes
    cudaMemPrefetchAsync cudaMemAdvise cudaHostAllocDefault cudaHostAllocMapped cudaHostAllocPortable
    cudaHostRegisterDefault cudaMemAttachGlobal cudaMemoryTypeDevice cudaMemoryTypeHost cudaDeviceSynchronize
    cudaDeviceReset cudaDeviceGetAttribute cudaDeviceProp cudaGetDeviceProperties cudaGetDevice cudaSetDevice
    cudaGetDeviceCount cudaDeviceSetCacheConfig cudaDeviceCanAccessPeer cudaDeviceEnablePeerAccess
    cudaDeviceAttr cudaDeviceSetLimit cudaDeviceGetLimit cudaLimitStackSize cudaLimitMallocHeapSize
    cudaDevAttrMultiProcessorCount cudaDevAttrMaxSharedMemoryPerBlockOptin cudaDevAttrMaxThreadsPerBlock
    cudaDevAttrWarpSize cudaDevAttrMaxSharedMemoryPerBlock cudaDevAttrL2CacheSize
    cudaDevAttrComputeCapabilityMajor cudaDevAttrComputeCapabilityMinor cudaDevAttrMaxBlockDimX
    cudaDevAttrMaxGridDimX cudaError_t cudaError cudaSuccess cudaErrorInvalidValue cudaErrorMemoryAllocation
    cudaErrorNotReady cudaGetLastError cudaPeekAtLastError cudaGetErrorString cudaGetErrorName cudaStream_t
    cudaStreamCreate cudaStreamCreateWithFlags cudaStreamCreateWithPriority cudaStreamDestroy
    cudaStreamSynchronize cudaStreamWaitEvent cudaStreamQuery cudaStreamNonBlocking cudaStreamDefault
    cudaStreamLegacy cudaStreamPerThread cudaStreamBeginCapture cudaStreamEndCapture cudaStreamCaptureModeGlobal
    cudaStreamGetPriority cudaDeviceGetStreamPriorityRange cudaEvent_t cudaEventCreate cudaEventCreateWithFlags
    cudaEventDestroy cudaEventRecord cudaEventSynchronize cudaEventElapsedTime cudaEventQuery cudaEventDefault
    cudaEventDisableTiming cudaEventBlockingSync cudaFuncSetAttribute cudaFuncGetAttributes cudaFuncAttributes
    cudaFuncAttributeMaxDynamicSharedMemorySize cudaFuncAttributePreferredSharedMemoryCarveout
    cudaFuncSetCacheConfig cudaFuncCachePreferShared cudaFuncCachePreferL1 cudaFuncCachePreferNone
    cudaFuncCachePreferEqual cudaLaunchKernel cudaLaunchCooperativeKernel
    cudaOccupancyMaxActiveBlocksPerMultiprocessor cudaOccupancyMaxPotentialBlockSize cudaGraph_t cudaGraphExec_t
    cudaGraphLaunch cudaGraphInstantiate cudaGraphDestroy cudaGraphExecDestroy cudaDataType cudaDataType_t
    cudaChannelFormatDesc cudaCreateChannelDesc cudaArray_t cudaTextureObject_t cudaCreateTextureObject
    cudaDestroyTextureObject cudaResourceDesc cudaTextureDesc cudaResourceTypeLinear cudaReadModeElementType
    cudaAddressModeClamp cudaFilterModePoint cudaGetSymbolAddress cudaDriverGetVersion cudaRuntimeGetVersion
    cudaIpcGetMemHandle cudaIpcOpenMemHandle cudaIpcMemHandle_t cudaProfilerStart cudaProfilerStop cudaMemPool_t
    cudaDeviceGetDefaultMemPool cudaExtent cudaPitchedPtr cudaPos
    """
CUDA_RUNTIME_NAMES = frozenset(CUDA_RUNTIME_WORDS.split())
# torch CUDA names whose torch_musa counterpart swaps CUDA for MUSA (torch_musa mapping/extra.json; torchada).
TORCH_CUDA_WORDS = """
    getCurrentCUDAStream getDefaultCUDAStream setCurrentCUDAStream CUDAStream CUDAGuard OptionalCUDAGuard
    CUDAStreamGuard OptionalCUDAStreamGuard CUDAEvent CUDACachingAllocator getCurrentCUDABlasHandle
    C10_CUDA_KERNEL_LAUNCH_CHECK C10_CUDA_CHECK AT_CUDA_CHECK TORCH_CUDABLAS_CHECK
"""
# Whole identifiers -> (new, rule).
IDENTS: dict[str, tuple[str, str]] = {
    **{k: (k.replace("CUDA", "MUSA"), "torch-api") for k in TORCH_CUDA_WORDS.split()},
    "kCUDA": ("kPrivateUse1", "torch-device"),
    "is_cuda": ("is_privateuseone", "torch-device"),
    "__nv_bfloat16": ("__mt_bfloat16", "dtype"),
    "__nv_bfloat162": ("__mt_bfloat162", "dtype"),
    "__nv_fp8_e4m3": ("__mt_fp8_e4m3", "dtype"),
    "__nv_fp8_e5m2": ("__mt_fp8_e5m2", "dtype"),
}
LIBS = {lib: "math-lib" for lib in ("cublas", "curand", "cufft", "cusparse", "cusolver")} | {"cudnn": "dnn"}
# (prefix pattern, replacement, rule): the matched prefix is replaced, the rest of the identifier kept.
PREFIXES: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"CUDART_"), "MUSART_", "runtime-api"),
    (re.compile(r"CUDA_(?=[RC]_\d)"), "MUSA_", "runtime-api"),
    *((re.compile(rf"{lib}(?=[A-Z_]|\Z)"), f"mu{lib[2:]}", rule) for lib, rule in LIBS.items()),
    *((re.compile(rf"{lib.upper()}(?=_|LT_)"), f"MU{lib[2:].upper()}", rule) for lib, rule in LIBS.items()),
)
DRIVER_API = re.compile(
    r"(cu(Init|Ctx|Module|Launch|Mem|Stream|Event|Device|Func|Graph|Tex|Surf|Link|Pointer|Occupancy|Array|GetErrorString)"
    r"\w*|CU(result|device|deviceptr|context|module|function|stream|event|graph)\w*)\Z"
)
# Left unchanged, with a warning.
IDENT_WARN: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(asm|__asm__|__asm)\Z"), "inline assembly (PTX) has no MUSA equivalent; rewrite in CUDA C++"),
    (re.compile(r"(wmma|nvcuda)\Z"), "WMMA/tensor-core API: no verified MUSA mapping"),
    (re.compile(r"__CUDA_ARCH__\Z"), "architecture guards: no verified MUSA macro; check the guarded code"),
    (re.compile(r"cuda[A-Z]\w*\Z"), "not in musaenv's list of CUDA runtime names; left unchanged"),
    (DRIVER_API, "CUDA driver API: no verified MUSA mapping"),
    (re.compile(r"__nv_\w+\Z"), "NVIDIA-specific type or intrinsic: no verified MUSA mapping"),
)
DNN_WARNING = "cuDNN renamed to muDNN by name as torch_musa's porting tables do; muDNN's API differs, verify"
# Defined in c10::musa by torch_musa (csrc/core/MUSAStream.h, MUSAGuard.h); other at::cuda:: names -> at::musa::.
C10_MUSA_WORDS = """
    getCurrentMUSAStream getDefaultMUSAStream setCurrentMUSAStream getStreamFromPool MUSAStream MUSAGuard
    OptionalMUSAGuard MUSAStreamGuard OptionalMUSAStreamGuard MUSACachingAllocator
"""
C10_MUSA_SYMBOLS = frozenset(C10_MUSA_WORDS.split())

PY_ATTRS = {"cuda": "musa", "is_cuda": "is_musa"}  # after a "."
PY_LOADER_NAMES = {
    "cuda_sources": "musa_sources",
    "extra_cuda_cflags": "extra_musa_cflags",
    "with_cuda": "with_musa",
    "CUDAExtension": "MUSAExtension",
    "CUDA_HOME": "MUSA_HOME",
}
MUSA_EXTENSION = "torch_musa.utils.musa_extension"
NVCC_FLAG = re.compile(
    r"(?<![\w-])(-arch=\S+|--gpu-architecture\S*|-gencode\S*|--generate-code\S*|-Xptxas\S*|--ptxas-options\S*"
    r"|-?-use_fast_math|--expt-[\w-]+|-lineinfo|-Xcompiler|--compiler-options)"
)
NVCC_FLAG_WARNING = "nvcc-only flag; torch_musa compiles with mcc (clang-based; arch flag --offload-arch=mp_XX)"

CPP_TOKEN = re.compile(
    r"(?P<lead>^[ \t]*\#[ \t]*include[ \t]*)(?P<open>[<\"])(?P<path>[^>\"\n]+)[>\"]"
    r"|(?<!\w)(?P<ns>at|c10|torch)\s*::\s*cuda\s*::\s*(?P<member>[A-Za-z_]\w*)"
    r"|(?<!\w)(?P<devtype>DeviceType\s*::\s*)CUDA(?!\w)"
    r"|(?<!\w)(?P<ident>[A-Za-z_]\w*)",
    re.M,
)
