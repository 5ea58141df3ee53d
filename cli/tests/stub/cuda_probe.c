/* Stand-in libcuda for the backend probe tests: fault injection, not a model of CUDA.
 *
 * CUDA_PROBE_STUB selects how cuInit behaves:
 *   ok (default)  succeed; CUDA_PROBE_STUB_DEVICES devices (default 1), device 1 integrated
 *   chatty        like ok, but the driver prints noise on stdout and stderr first
 *   nodevice      cuInit returns CUDA_ERROR_NO_DEVICE (100)
 *   stub          cuInit returns CUDA_ERROR_STUB_LIBRARY (34), as the toolkit's stub libcuda does
 *   zero          cuInit succeeds, cuDeviceGetCount reports 0
 *   error         cuInit returns CUDA_ERROR_UNKNOWN (999)
 *   segv          cuInit dereferences a null pointer (SIGSEGV)
 *   abort         cuInit prints a message and aborts (SIGABRT)
 *   exit3         cuInit exits the process with status 3
 *   exit0         cuInit exits the process with status 0 without a word
 *   hang          cuInit prints a message and never returns
 *   garbage       cuInit prints a truncated probe answer on stdout and exits 0
 *   flood         cuInit writes to stdout and stderr without end (a chatty driver)
 *   helper-segv   cuInit starts a helper process that inherits stdout and stderr and keeps
 *                 them open (it ends itself after 30 s), then dereferences null (SIGSEGV)
 * CUDA_PROBE_STUB_DRIVER, when set, is the driver version cuDriverGetVersion reports (12080).
 * CUDA_PROBE_STUB_COUNT, when set, names a file that gets one line per cuInit call, so tests
 * can count how many probes really reached the driver; helper-segv adds a line with the
 * helper's pid.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;

static const char *mode(void) {
    const char *m = getenv("CUDA_PROBE_STUB");
    return m ? m : "ok";
}

static int is(const char *m) { return strcmp(mode(), m) == 0; }

static void say(int fd, const char *s) {
    ssize_t r = write(fd, s, strlen(s));
    (void)r;
}

static void count_call(void) {
    const char *path = getenv("CUDA_PROBE_STUB_COUNT");
    if (!path) return;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd < 0) return;
    char line[64];
    snprintf(line, sizeof line, "cuInit pid %d\n", (int)getpid());
    say(fd, line);
    close(fd);
}

CUresult cuInit(unsigned int flags) {
    (void)flags;
    count_call();
    if (is("chatty")) {
        say(1, "stub driver: noise on stdout\n");
        say(2, "stub driver: noise on stderr\n");
        return 0;
    }
    if (is("nodevice")) return 100;
    if (is("stub")) return 34;
    if (is("error")) return 999;
    if (is("segv")) {
        say(2, "stub driver: about to dereference null\n");
        volatile int *p = (volatile int *)0;
        *p = 1;
    }
    if (is("abort")) {
        say(2, "stub driver: fatal error in cuInit, aborting\n");
        abort();
    }
    if (is("exit3")) {
        say(2, "stub driver: giving up with status 3\n");
        _exit(3);
    }
    if (is("exit0")) _exit(0);
    if (is("hang")) {
        say(2, "stub driver: waiting forever in cuInit\n");
        for (;;) pause();
    }
    if (is("flood")) {
        char noise[4096];
        memset(noise, 'n', sizeof noise);
        noise[sizeof noise - 1] = '\n';
        say(2, "stub driver: flooding stdout and stderr\n");
        for (;;) {
            if (write(1, noise, sizeof noise) < 0 || write(2, noise, sizeof noise) < 0) _exit(9);
            usleep(50);
        }
    }
    if (is("helper-segv")) {
        pid_t helper = fork();
        if (helper == 0) {
            alarm(30);
            for (;;) pause();
        }
        const char *path = getenv("CUDA_PROBE_STUB_COUNT");
        if (path) {
            int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
            char line[64];
            snprintf(line, sizeof line, "helper pid %d\n", (int)helper);
            if (fd >= 0) {
                say(fd, line);
                close(fd);
            }
        }
        say(2, "stub driver: started a helper, about to dereference null\n");
        volatile int *p = (volatile int *)0;
        *p = 1;
    }
    if (is("garbage")) {
        say(1, "GPU_TEST_PERMIT_PROBE_ANSWER:{\"v\":1,\"answer\":{\"Probe\":{\"outc");
        _exit(0);
    }
    return 0;
}

CUresult cuDriverGetVersion(int *version) {
    const char *v = getenv("CUDA_PROBE_STUB_DRIVER");
    *version = v ? atoi(v) : 12080;
    return 0;
}

static int devices(void) {
    if (is("zero")) return 0;
    const char *n = getenv("CUDA_PROBE_STUB_DEVICES");
    return n ? atoi(n) : 1;
}

CUresult cuDeviceGetCount(int *count) {
    *count = devices();
    return 0;
}

CUresult cuDeviceGet(CUdevice *dev, int ordinal) {
    if (ordinal < 0 || ordinal >= devices()) return 101; /* CUDA_ERROR_INVALID_DEVICE */
    *dev = ordinal;
    return 0;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    snprintf(name, (size_t)len, "Stub GPU %d", dev);
    return 0;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    *bytes = (size_t)(dev + 1) << 30;
    return 0;
}

CUresult cuDeviceGetAttribute(int *value, int attrib, CUdevice dev) {
    if (attrib == 18) { /* CU_DEVICE_ATTRIBUTE_INTEGRATED */
        *value = dev == 1;
        return 0;
    }
    return 1; /* CUDA_ERROR_INVALID_VALUE */
}
