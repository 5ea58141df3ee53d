/* Stand-in libnvidia-ml for the live GPU memory tests: fault injection and a test double, not a
 * model of NVML. Built as libnvidia-ml.so.1 (and libnvidia-ml.so).
 *
 * NVML_STUB=initfail     nvmlInit_v2 returns NVML_ERROR_DRIVER_NOT_LOADED (9)
 * NVML_STUB_GPUS         GPUs of the pretend machine (default 8), each 80 GiB, all free
 * NVML_STUB_STATE        file read again on EVERY call (when set and present), so a test changes
 *                        what the stub reports while a process runs. One item a line, fields
 *                        separated by spaces, unknown lines ignored:
 *                          free <gpu> <bytes>         the GPU's free memory (default: all of it)
 *                          proc <gpu> <pid> <bytes>   a process on the GPU; bytes "na" is
 *                                                     NVML_VALUE_NOT_AVAILABLE; listed by the
 *                                                     compute call
 *                          gproc <gpu> <pid> <bytes>  the same, listed by the graphics call
 *                          name <pid> <text>          nvmlSystemGetProcessName's answer (the
 *                                                     rest of the line); other pids: not found
 *                          uuid <gpu> <text>          the GPU's UUID (default
 *                                                     GPU-00000000-0000-0000-0000-00000000000<gpu>)
 *                          hang <gpu>                 nvmlDeviceGetMemoryInfo for the GPU does not
 *                                                     return while the line is there (a wedged
 *                                                     driver)
 *
 * nvmlInit_v2 loads libcuda.so.1 where the library path has one, as NVIDIA's NVML does (driver
 * 580: it `dlopen`s the CUDA driver and keeps it, opening no context); with NVML_STUB_LOG set,
 * it appends a line to that file saying whether it did.
 *
 * nvmlDeviceGetCount_v2 and nvmlDeviceGetHandleByIndex_v2 count GPUs; a handle is the GPU's
 * index plus one. The process calls answer NVML_ERROR_INSUFFICIENT_SIZE (7) with the count
 * needed when the caller's buffer is too small, as NVML does.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

#define SUCCESS 0
#define ERROR_INVALID_ARGUMENT 2
#define ERROR_NOT_FOUND 6
#define ERROR_INSUFFICIENT_SIZE 7
#define ERROR_DRIVER_NOT_LOADED 9
#define NOT_AVAILABLE 0xffffffffffffffffULL
#define TOTAL (80ULL << 30)
#define MAX_GPUS 64

static int gpus(void) {
    const char *n = getenv("NVML_STUB_GPUS");
    int count = n ? atoi(n) : 8;
    if (count < 0) count = 0;
    return count > MAX_GPUS ? MAX_GPUS : count;
}

static int gpu_of(nvmlDevice_t device) {
    long g = (long)device - 1;
    return g >= 0 && g < gpus() ? (int)g : -1;
}

/* Calls `line` for each line of the state file; a missing file has none. */
static void each_line(void (*line)(const char *, void *), void *arg) {
    const char *path = getenv("NVML_STUB_STATE");
    if (!path) return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char buf[512];
    while (fgets(buf, sizeof buf, f)) {
        buf[strcspn(buf, "\n")] = 0;
        line(buf, arg);
    }
    fclose(f);
}

nvmlReturn_t nvmlInit_v2(void) {
    const char *m = getenv("NVML_STUB");
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    const char *log = getenv("NVML_STUB_LOG");
    FILE *f = log ? fopen(log, "a") : NULL;
    if (f) {
        fprintf(f, "nvmlInit_v2 %s libcuda.so.1\n", cuda ? "loaded" : "found no");
        fclose(f);
    }
    return m && strcmp(m, "initfail") == 0 ? ERROR_DRIVER_NOT_LOADED : SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) { return SUCCESS; }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    *count = (unsigned int)gpus();
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (index >= (unsigned int)gpus()) return ERROR_INVALID_ARGUMENT;
    *device = (nvmlDevice_t)(long)(index + 1);
    return SUCCESS;
}

struct uuid_query {
    int gpu;
    char uuid[96];
};

static void uuid_line(const char *line, void *arg) {
    struct uuid_query *q = arg;
    int gpu, n = 0;
    if (sscanf(line, "uuid %d %n", &gpu, &n) == 1 && n > 0 && gpu == q->gpu)
        snprintf(q->uuid, sizeof q->uuid, "%s", line + n);
}

static void uuid_of(int gpu, char *out, size_t len) {
    struct uuid_query q = {gpu, ""};
    snprintf(q.uuid, sizeof q.uuid, "GPU-00000000-0000-0000-0000-%012d", gpu);
    each_line(uuid_line, &q);
    snprintf(out, len, "%s", q.uuid);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    int gpu = gpu_of(device);
    if (gpu < 0) return ERROR_INVALID_ARGUMENT;
    char own[96];
    uuid_of(gpu, own, sizeof own);
    if (strlen(own) + 1 > length) return ERROR_INSUFFICIENT_SIZE;
    snprintf(uuid, length, "%s", own);
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    for (int gpu = 0; gpu < gpus(); gpu++) {
        char own[96];
        uuid_of(gpu, own, sizeof own);
        if (strcmp(own, uuid) == 0) {
            *device = (nvmlDevice_t)(long)(gpu + 1);
            return SUCCESS;
        }
    }
    return ERROR_NOT_FOUND;
}

struct free_query {
    int gpu;
    unsigned long long free;
};

static void free_line(const char *line, void *arg) {
    struct free_query *q = arg;
    int gpu;
    unsigned long long bytes;
    if (sscanf(line, "free %d %llu", &gpu, &bytes) == 2 && gpu == q->gpu) q->free = bytes;
}

static void hang_line(const char *line, void *arg) {
    int *q = arg; /* q[0]: the GPU, q[1]: set when a line names it */
    int gpu;
    if (sscanf(line, "hang %d", &gpu) == 1 && gpu == q[0]) q[1] = 1;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    int gpu = gpu_of(device);
    if (gpu < 0) return ERROR_INVALID_ARGUMENT;
    /* A wedged driver: no answer while the state file has a `hang <gpu>` line. */
    for (;;) {
        int q[2] = {gpu, 0};
        each_line(hang_line, q);
        if (!q[1]) break;
        usleep(10000);
    }
    struct free_query q = {gpu, TOTAL};
    each_line(free_line, &q);
    memory->total = TOTAL;
    memory->free = q.free > TOTAL ? TOTAL : q.free;
    memory->used = TOTAL - memory->free;
    return SUCCESS;
}

struct proc_query {
    const char *kind; /* "proc" or "gproc" */
    int gpu;
    unsigned int room;
    unsigned int count;
    nvmlProcessInfo_t *out;
};

static void proc_line(const char *line, void *arg) {
    struct proc_query *q = arg;
    char kind[8], bytes[32];
    int gpu;
    unsigned int pid;
    if (sscanf(line, "%7s %d %u %31s", kind, &gpu, &pid, bytes) != 4) return;
    if (strcmp(kind, q->kind) != 0 || gpu != q->gpu) return;
    if (q->count < q->room) {
        nvmlProcessInfo_t *p = &q->out[q->count];
        memset(p, 0, sizeof *p);
        p->pid = pid;
        p->usedGpuMemory = strcmp(bytes, "na") == 0 ? NOT_AVAILABLE : strtoull(bytes, 0, 10);
        p->gpuInstanceId = 0xffffffffu;
        p->computeInstanceId = 0xffffffffu;
    }
    q->count++;
}

static nvmlReturn_t processes(const char *kind, nvmlDevice_t device, unsigned int *count,
                              nvmlProcessInfo_t *infos) {
    int gpu = gpu_of(device);
    if (gpu < 0 || !count) return ERROR_INVALID_ARGUMENT;
    struct proc_query q = {kind, gpu, infos ? *count : 0, 0, infos};
    each_line(proc_line, &q);
    if (q.count > q.room) {
        *count = q.count;
        return ERROR_INSUFFICIENT_SIZE;
    }
    *count = q.count;
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    return processes("proc", device, count, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                      nvmlProcessInfo_t *infos) {
    return processes("gproc", device, count, infos);
}

struct name_query {
    unsigned int pid;
    int found;
    char name[256];
};

static void name_line(const char *line, void *arg) {
    struct name_query *q = arg;
    unsigned int pid;
    int n = 0;
    if (sscanf(line, "name %u %n", &pid, &n) == 1 && n > 0 && pid == q->pid) {
        snprintf(q->name, sizeof q->name, "%s", line + n);
        q->found = 1;
    }
}

nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length) {
    struct name_query q = {pid, 0, ""};
    each_line(name_line, &q);
    if (!q.found) return ERROR_NOT_FOUND;
    if (length == 0) return ERROR_INSUFFICIENT_SIZE;
    snprintf(name, length, "%s", q.name);
    return SUCCESS;
}
