/* Stand-in libcuda for the device-visibility tests: it honours CUDA_VISIBLE_DEVICES the way
 * the real driver does, in the small, and says what it saw. Not a model of CUDA.
 *
 * CUDA_VISIBLE_STUB_GPUS   physical GPUs of the pretend machine (default 4)
 * CUDA_VISIBLE_STUB_SEEN   file that gets one line per event:
 *                            "init <CUDA_VISIBLE_DEVICES or -unset->" at cuInit
 *                            "ctx <ordinal> gpu <physical>" when a context is made
 *
 * CUDA_VISIBLE_DEVICES entries are physical indices; the list ends at the first entry that is
 * not one (as in the driver). Device i is named "Stub GPU <physical index>".
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;

static int visible[64];
static int n_visible = -1;
static void *current_ctx;
static int ctx_token;

static void seen(const char *line) {
    const char *path = getenv("CUDA_VISIBLE_STUB_SEEN");
    if (!path) return;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd < 0) return;
    ssize_t r = write(fd, line, strlen(line));
    (void)r;
    close(fd);
}

static void scan(void) {
    if (n_visible >= 0) return;
    const char *g = getenv("CUDA_VISIBLE_STUB_GPUS");
    int physical = g ? atoi(g) : 4;
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    n_visible = 0;
    if (!cvd) {
        for (int i = 0; i < physical && i < 64; i++) visible[n_visible++] = i;
        return;
    }
    const char *p = cvd;
    while (*p && n_visible < 64) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= physical) break;
        visible[n_visible++] = (int)v;
        p = end;
        if (*p != ',') break;
        p++;
    }
}

CUresult cuInit(unsigned flags) {
    (void)flags;
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    char line[512];
    snprintf(line, sizeof line, "init %s\n", cvd ? cvd : "-unset-");
    seen(line);
    scan();
    return 0;
}

CUresult cuDriverGetVersion(int *v) { *v = 12080; return 0; }

CUresult cuDeviceGetCount(int *n) {
    scan();
    *n = n_visible;
    return 0;
}

CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    scan();
    if (ordinal < 0 || ordinal >= n_visible) return 101; /* CUDA_ERROR_INVALID_DEVICE */
    *d = ordinal;
    return 0;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    snprintf(name, (size_t)len, "Stub GPU %d", visible[d]);
    return 0;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
    (void)d;
    *bytes = (size_t)1 << 30;
    return 0;
}

CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
    (void)attr;
    (void)d;
    *v = 0;
    return 0;
}

CUresult cuDevicePrimaryCtxRetain(void **ctx, CUdevice d) {
    char line[64];
    snprintf(line, sizeof line, "ctx %d gpu %d\n", d, visible[d]);
    seen(line);
    *ctx = &ctx_token;
    return 0;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { (void)d; return 0; }
CUresult cuCtxGetCurrent(void **ctx) { *ctx = current_ctx; return 0; }
CUresult cuCtxSetCurrent(void *ctx) { current_ctx = ctx; return 0; }
CUresult cuCtxSynchronize(void) { return 0; }

CUresult cuStreamCreate(void **out, unsigned flags) {
    (void)flags;
    *out = malloc(1);
    return 0;
}
CUresult cuStreamCreateWithPriority(void **out, unsigned flags, int prio) {
    (void)prio;
    return cuStreamCreate(out, flags);
}
CUresult cuStreamSynchronize(void *h) { (void)h; return 0; }
CUresult cuStreamDestroy_v2(void *h) { free(h); return 0; }
CUresult cuEventCreate(void **e, unsigned flags) { (void)flags; *e = malloc(1); return 0; }
CUresult cuEventDestroy_v2(void *e) { free(e); return 0; }
CUresult cuEventRecord(void *e, void *h) { (void)e; (void)h; return 0; }
CUresult cuStreamWaitEvent(void *h, void *e, unsigned flags) {
    (void)h;
    (void)e;
    (void)flags;
    return 0;
}
CUresult cuGetErrorName(CUresult e, const char **s) { (void)e; *s = "STUB_ERROR"; return 0; }
CUresult cuGetErrorString(CUresult e, const char **s) { (void)e; *s = "stub error"; return 0; }
