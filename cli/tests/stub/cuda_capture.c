/*
 * Stand-in libcuda that models the stream-capture state machine, for the capture guard tests.
 *
 * - cuStreamBeginCapture_v2 makes a stream ACTIVE (ILLEGAL_STATE if it already captures).
 * - cuMemAlloc_v2 while a global-mode capture is open (any thread) or a thread-local one on the
 *   calling thread returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900) and INVALIDATES those
 *   captures; so do cuStreamSynchronize on a capturing stream and cuCtxSynchronize while any
 *   stream captures (relaxed mode too). cuMemcpyHtoDAsync_v2 is recorded into the capture.
 *   These are what a real driver did (H100, driver 580; see the cuda_device_ tests).
 * - cuStreamEndCapture on an INVALIDATED stream returns CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
 *   (901) and no graph; on an ACTIVE one a graph.
 * - cuStreamIsCapturing on the legacy stream while a blocking stream captures returns
 *   CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (906). STUB_IS_CAPTURING_RESULT=<code> makes every
 *   query fail with <code>.
 * - STUB_MEMORY_POOLS=1 reports memory-pool support (cudarc then allocates with
 *   cuMemAllocAsync, which is capturable).
 *
 * stub_count("<symbol>") returns how often the driver saw a call, so tests can show that the
 * guard refused a call before the driver saw it. It models this crate's view of the driver; it
 * proves nothing about real CUDA.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

enum { NONE = 0, ACTIVE = 1, INVALIDATED = 2 };
enum { MODE_GLOBAL = 0, MODE_THREAD_LOCAL = 1, MODE_RELAXED = 2 };

typedef struct stream {
    int live;
    int blocking;
    int status;
    int mode;
    pthread_t owner;
    int nodes;
} stream;

#define MAX_STREAMS 256
static stream streams[MAX_STREAMS]; /* streams[0] is the legacy stream; 1, 2 unused */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static __thread void *current_ctx;
static int ctx_token;
static CUdeviceptr next_ptr = 0x10000;

/* Call counters, by symbol. */
static const char *counted[] = {"cuMemAlloc_v2",       "cuMemAllocAsync",    "cuMemcpyHtoDAsync_v2",
                                "cuStreamSynchronize", "cuCtxSynchronize",   "cuStreamIsCapturing",
                                "cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuGraphLaunch",
                                "cuMemsetD8Async"};
#define NCOUNTED (sizeof counted / sizeof counted[0])
static int counts[NCOUNTED];

static void count(const char *name) {
    for (size_t i = 0; i < NCOUNTED; i++)
        if (strcmp(counted[i], name) == 0) __atomic_fetch_add(&counts[i], 1, __ATOMIC_SEQ_CST);
}

int stub_count(const char *name) {
    for (size_t i = 0; i < NCOUNTED; i++)
        if (strcmp(counted[i], name) == 0) return __atomic_load_n(&counts[i], __ATOMIC_SEQ_CST);
    return -1;
}

static stream *get(void *handle) {
    /* Handles are 1-based indices; null is the legacy stream, 0x1/0x2 the legacy and
     * per-thread stream aliases. */
    size_t i = (size_t)handle;
    if (i == 1 || i == 2) i = 0;
    if (i >= MAX_STREAMS) return NULL;
    if (i != 0 && !streams[i].live) return NULL;
    return &streams[i];
}

/* Whether "potentially unsafe" calls are forbidden on this thread now; if so, invalidate the
 * captures that forbid them. Caller holds mu. */
static int forbidden_here_invalidate(void) {
    int forbidden = 0;
    for (size_t i = 0; i < MAX_STREAMS; i++) {
        stream *s = &streams[i];
        if (s->status != ACTIVE) continue;
        if (s->mode == MODE_GLOBAL ||
            (s->mode == MODE_THREAD_LOCAL && pthread_equal(s->owner, pthread_self()))) {
            s->status = INVALIDATED;
            forbidden = 1;
        }
    }
    return forbidden;
}

CUresult cuInit(unsigned flags) { (void)flags; return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    if (ordinal != 0) return 101; /* CUDA_ERROR_INVALID_DEVICE */
    *d = 0;
    return 0;
}
CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
    (void)d;
    const char *pools = getenv("STUB_MEMORY_POOLS");
    /* 115 = CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED */
    *v = (attr == 115 && pools && strcmp(pools, "1") == 0) ? 1 : 0;
    return 0;
}
CUresult cuDevicePrimaryCtxRetain(void **ctx, CUdevice d) { (void)d; *ctx = &ctx_token; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { (void)d; return 0; }
CUresult cuCtxGetCurrent(void **ctx) { *ctx = current_ctx; return 0; }
CUresult cuCtxSetCurrent(void *ctx) { current_ctx = ctx; return 0; }

CUresult cuCtxSynchronize(void) {
    count("cuCtxSynchronize");
    pthread_mutex_lock(&mu);
    int capturing = 0;
    for (size_t i = 0; i < MAX_STREAMS; i++)
        if (streams[i].status == ACTIVE) {
            streams[i].status = INVALIDATED;
            capturing = 1;
        }
    pthread_mutex_unlock(&mu);
    return capturing ? 900 : 0;
}

static CUresult create(void **out, unsigned flags) {
    pthread_mutex_lock(&mu);
    /* From 3: handles 1 and 2 are the legacy and per-thread aliases. */
    for (size_t i = 3; i < MAX_STREAMS; i++)
        if (!streams[i].live) {
            memset(&streams[i], 0, sizeof streams[i]);
            streams[i].live = 1;
            streams[i].blocking = !(flags & 1); /* CU_STREAM_NON_BLOCKING = 1 */
            *out = (void *)i;
            pthread_mutex_unlock(&mu);
            return 0;
        }
    pthread_mutex_unlock(&mu);
    return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
}
CUresult cuStreamCreate(void **out, unsigned flags) { return create(out, flags); }
CUresult cuStreamCreateWithPriority(void **out, unsigned flags, int prio) {
    (void)prio;
    return create(out, flags);
}
CUresult cuStreamDestroy_v2(void *h) {
    pthread_mutex_lock(&mu);
    stream *s = get(h);
    if (s && h) s->live = 0;
    pthread_mutex_unlock(&mu);
    return s ? 0 : 400;
}

CUresult cuStreamSynchronize(void *h) {
    count("cuStreamSynchronize");
    pthread_mutex_lock(&mu);
    stream *s = get(h);
    CUresult r = 0;
    if (!s) r = 400;
    else if (s->status != NONE) {
        s->status = INVALIDATED;
        r = 900;
    }
    pthread_mutex_unlock(&mu);
    return r;
}

CUresult cuStreamIsCapturing(void *h, int *status) {
    count("cuStreamIsCapturing");
    const char *fail = getenv("STUB_IS_CAPTURING_RESULT");
    if (fail && *fail) return atoi(fail);
    pthread_mutex_lock(&mu);
    stream *s = get(h);
    CUresult r = 0;
    if (!s) r = 400; /* CUDA_ERROR_INVALID_HANDLE */
    else if (s == &streams[0]) {
        for (size_t i = 1; i < MAX_STREAMS; i++)
            if (streams[i].live && streams[i].blocking && streams[i].status != NONE &&
                streams[i].mode != MODE_RELAXED)
                r = 906; /* CUDA_ERROR_STREAM_CAPTURE_IMPLICIT */
        if (!r) *status = s->status;
    } else *status = s->status;
    pthread_mutex_unlock(&mu);
    return r;
}

CUresult cuStreamBeginCapture_v2(void *h, int mode) {
    count("cuStreamBeginCapture_v2");
    pthread_mutex_lock(&mu);
    stream *s = get(h);
    CUresult r = 0;
    if (!s) r = 400;
    else if (s->status != NONE) r = 401; /* CUDA_ERROR_ILLEGAL_STATE */
    else {
        s->status = ACTIVE;
        s->mode = mode;
        s->owner = pthread_self();
        s->nodes = 0;
    }
    pthread_mutex_unlock(&mu);
    return r;
}

CUresult cuStreamEndCapture(void *h, void **graph) {
    count("cuStreamEndCapture");
    pthread_mutex_lock(&mu);
    stream *s = get(h);
    CUresult r = 0;
    *graph = NULL;
    if (!s) r = 400;
    else if (s->status == NONE) r = 401;
    else if (s->mode != MODE_RELAXED && !pthread_equal(s->owner, pthread_self())) r = 908;
    else if (s->status == INVALIDATED) {
        s->status = NONE;
        r = 901; /* CUDA_ERROR_STREAM_CAPTURE_INVALIDATED */
    } else {
        s->status = NONE;
        int *g = malloc(sizeof(int));
        *g = s->nodes;
        *graph = g;
    }
    pthread_mutex_unlock(&mu);
    return r;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    count("cuMemAlloc_v2");
    pthread_mutex_lock(&mu);
    int forbidden = forbidden_here_invalidate();
    if (!forbidden) {
        *p = next_ptr;
        next_ptr += (n + 255) & ~(size_t)255;
        if (n == 0) next_ptr += 256;
    }
    pthread_mutex_unlock(&mu);
    if (forbidden) fprintf(stderr, "stub libcuda: cuMemAlloc_v2 during capture -> 900\n");
    return forbidden ? 900 : 0;
}

CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, void *h) {
    count("cuMemAllocAsync");
    pthread_mutex_lock(&mu);
    stream *s = get(h);
    if (s && s->status == ACTIVE) s->nodes++;
    *p = next_ptr;
    next_ptr += ((n + 255) & ~(size_t)255) + 256;
    pthread_mutex_unlock(&mu);
    return s ? 0 : 400;
}

CUresult cuMemFree_v2(CUdeviceptr p) { (void)p; return 0; }
CUresult cuMemFreeAsync(CUdeviceptr p, void *h) { (void)p; (void)h; return 0; }

CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, void *h) {
    (void)p; (void)v; (void)n;
    count("cuMemsetD8Async");
    pthread_mutex_lock(&mu);
    stream *s = get(h);
    if (s && s->status == ACTIVE) s->nodes++;
    pthread_mutex_unlock(&mu);
    return s ? 0 : 400;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *h) {
    (void)dst; (void)src; (void)n;
    count("cuMemcpyHtoDAsync_v2");
    pthread_mutex_lock(&mu);
    stream *s = get(h);
    CUresult r = 0;
    if (!s) r = 400;
    else if (s->status == ACTIVE) s->nodes++; /* recorded, as an H100 driver 580 does */
    pthread_mutex_unlock(&mu);
    return r;
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *h) {
    (void)src;
    memset(dst, 0, n);
    return get(h) ? 0 : 400;
}

CUresult cuEventCreate(void **e, unsigned flags) { (void)flags; *e = malloc(1); return 0; }
CUresult cuEventDestroy_v2(void *e) { free(e); return 0; }
CUresult cuEventRecord(void *e, void *h) { (void)e; return get(h) ? 0 : 400; }
CUresult cuEventSynchronize(void *e) { (void)e; return 0; }
CUresult cuStreamWaitEvent(void *h, void *e, unsigned flags) {
    (void)e; (void)flags;
    return get(h) ? 0 : 400;
}

CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) {
    (void)flags;
    *exec = graph;
    return 0;
}
CUresult cuGraphLaunch(void *exec, void *h) {
    (void)exec;
    count("cuGraphLaunch");
    return get(h) ? 0 : 400;
}
CUresult cuGraphExecDestroy(void *exec) { (void)exec; return 0; }
CUresult cuGraphDestroy(void *graph) { free(graph); return 0; }

CUresult cuGetErrorName(CUresult e, const char **s) { (void)e; *s = "STUB_ERROR"; return 0; }
CUresult cuGetErrorString(CUresult e, const char **s) { (void)e; *s = "stub error"; return 0; }
