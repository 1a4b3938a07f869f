/* The C interface between the core (which dlopens the plugin) and libqvl-cuda. Plain C so that the core needs
 * neither CUDA headers nor the CUDA runtime; bump QVL_CUDA_PLUGIN_ABI on any change. */
#ifndef QVL_KERNELS_PLUGIN_ABI_H
#define QVL_KERNELS_PLUGIN_ABI_H
#include <stddef.h>

#define QVL_CUDA_PLUGIN_ABI 14

#ifdef __cplusplus
extern "C" {
#endif

/* Returns QVL_CUDA_PLUGIN_ABI as the plugin was built. */
int qvl_cuda_plugin_abi(void);

/* Probes the CUDA devices and writes a JSON object into `out` (at most `capacity` bytes, NUL-terminated):
 *   {"driver": int, "runtime": int, "archs": [61, ...], "devices": [{"index", "name", "cc", "memory_bytes",
 *    "multiprocessors", "kernel_ok", "error"}], "error": null | "why no device is usable"}
 * Returns the length the full text needs (excluding the NUL), like snprintf. */
size_t qvl_cuda_probe(char* out, size_t capacity);

/* Creates the CUDA backend on `device` with a memory pool of at most `capacity` bytes (0: no limit) and an
 * architecture profile: "auto" (from the GPU), "sm61" or "native". Returns a qvl::Backend* (the core's C++
 * interface; plugin and core come from one build), or NULL with a message in `error`. */
void* qvl_cuda_create_backend(int device, size_t capacity, const char* profile, char* error, size_t error_capacity);

#ifdef __cplusplus
}
#endif
#endif
