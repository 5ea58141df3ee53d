/* An LD_PRELOAD library that logs, in order, a process's flock(2) calls and positioned writes
 * (pwrite64), each with the name of the file: for tests of the order in which the crate takes,
 * writes and lets go of its files. It changes nothing about the calls.
 *
 * LOCK_LOG   file that gets one line per call:
 *              "flock <path> <operation>"
 *              "pwrite <path> <offset> <first byte, or '.' for a blank or unprintable one>"
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/types.h>
#include <unistd.h>

static void logged(const char *what, int fd, const char *detail) {
    const char *log = getenv("LOCK_LOG");
    if (!log) return;
    char link[64], path[512], line[700];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n < 0) n = 0;
    path[n] = 0;
    int len = snprintf(line, sizeof line, "%s %s %s\n", what, path, detail);
    int out = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (out < 0) return;
    if (len > 0) (void)!write(out, line, (size_t)len);
    close(out);
}

int flock(int fd, int operation) {
    static int (*real)(int, int);
    if (!real) real = (int (*)(int, int))dlsym(RTLD_NEXT, "flock");
    int rc = real(fd, operation);
    char detail[32];
    snprintf(detail, sizeof detail, "%d", operation);
    logged("flock", fd, detail);
    return rc;
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (!real) real = (ssize_t (*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite64");
    char first = count > 0 ? ((const char *)buf)[0] : '.';
    char detail[64];
    snprintf(detail, sizeof detail, "%lld %c", (long long)offset, first > ' ' && first < 127 ? first : '.');
    logged("pwrite", fd, detail);
    return real(fd, buf, count, offset);
}
