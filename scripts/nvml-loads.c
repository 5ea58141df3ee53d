/* NVML on this machine's driver, as the crate calls it for live GPU memory
 * (src/live/nvml.rs): the wall time of each call, and the driver libraries (libcuda*,
 * libnvidia*) the process has mapped after it. `nvmlInit_v2` loads libcuda on NVIDIA's
 * driver 580, which is why the crate counts what NVML maps as its own, never a test's
 * (`sys::for_own_use`, src/sys/mod.rs).
 *
 * Built by scripts/gpu-validate.sh into gpu-run/bin/nvml-loads; run by gpu-device.sh:
 *   cc -O1 -o nvml-loads scripts/nvml-loads.c -ldl && ./nvml-loads
 * Exit status 1 where NVML cannot be loaded. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef int (*init_t)(void);
typedef int (*count_t)(unsigned *);
typedef int (*handle_t)(unsigned, void **);
typedef int (*mem_t)(void *, unsigned long long *);
typedef int (*procs_t)(void *, unsigned *, void *);

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void maps(const char *after, double ms) {
    char line[4096], seen[8192] = "";
    FILE *f = fopen("/proc/self/maps", "r");
    while (f && fgets(line, sizeof line, f)) {
        char *p = strchr(line, '/');
        if (!p) continue;
        p[strcspn(p, "\n")] = 0;
        const char *base = strrchr(p, '/') + 1;
        if ((strncmp(base, "libcuda", 7) == 0 || strncmp(base, "libnvidia", 9) == 0) && !strstr(seen, base)) {
            strncat(seen, base, sizeof seen - strlen(seen) - 2);
            strcat(seen, " ");
        }
    }
    if (f) fclose(f);
    printf("after %-40s %8.3f ms; mapped: %s\n", after, ms, seen[0] ? seen : "(none)");
}

int main(void) {
    double t = now_ms();
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    maps("dlopen(libnvidia-ml.so.1)", now_ms() - t);
    if (!lib) return 1;
    t = now_ms();
    int r = ((init_t)dlsym(lib, "nvmlInit_v2"))();
    maps("nvmlInit_v2", now_ms() - t);
    unsigned n = 0;
    t = now_ms();
    ((count_t)dlsym(lib, "nvmlDeviceGetCount_v2"))(&n);
    maps("nvmlDeviceGetCount_v2", now_ms() - t);
    void *dev = 0;
    t = now_ms();
    ((handle_t)dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"))(0, &dev);
    maps("nvmlDeviceGetHandleByIndex_v2", now_ms() - t);
    unsigned long long m[3];
    for (int i = 0; i < 3; i++) {
        t = now_ms();
        ((mem_t)dlsym(lib, "nvmlDeviceGetMemoryInfo"))(dev, m);
        maps("nvmlDeviceGetMemoryInfo", now_ms() - t);
    }
    unsigned char buf[64 * 24];
    const char *names[] = {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3"};
    for (int k = 0; k < 2; k++) for (int i = 0; i < 2; i++) {
        unsigned c = 64;
        t = now_ms();
        ((procs_t)dlsym(lib, names[k]))(dev, &c, buf);
        maps(names[k], now_ms() - t);
    }
    printf("init %d, %u devices, total %llu free %llu\n", r, n, m[0], m[1]);
    return 0;
}
