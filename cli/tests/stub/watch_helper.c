/* A program for the driver watch's tests (tests/it/watch.rs): a test's helper process that
 * loads a GPU driver without a permit, a program linked to a driver at build time, a process
 * whose loader log grows long before it loads one. It never creates a GPU context.
 *
 * Built plain:                 cc -O1 -o watch_helper watch_helper.c -ldl
 * Linked to libcuda (DT_NEEDED), as cudarc's `dynamic-linking` or `cust` link it:
 *                              cc -O1 -o watch_helper_linked watch_helper.c -ldl \
 *                                 -Wl,--no-as-needed -L<dir with libcuda.so> -lcuda
 * (on a machine with NVIDIA's driver, -lcuda finds the real one).
 *
 * The arguments are steps, done in order:
 *   dlopen NAME          dlopen(NAME) and keep it loaded (exit 2 where it fails)
 *   pad LIBRARY COUNT    dlopen and dlclose LIBRARY (a path) COUNT times, through a path
 *                        made long with "./" components, so that the loader's log grows by
 *                        about 23 KiB each time (LD_DEBUG=files)
 *   maps                 print "ready" and wait until standard input closes (a test reads
 *                        /proc/<pid>/maps meanwhile)
 *   run PROGRAM ARGS...  run PROGRAM with the rest of the arguments as a child process (it
 *                        inherits the environment) and exit as it did
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int pad(const char *library, long count) {
    static char path[4096];
    const char *slash = strrchr(library, '/');
    size_t dir = slash ? (size_t)(slash - library) + 1 : 0;
    size_t name = strlen(library) - dir;
    size_t at = 0;
    memcpy(path, library, dir);
    at = dir;
    while (at + 2 + name + 1 < 4000) {
        memcpy(path + at, "./", 2);
        at += 2;
    }
    memcpy(path + at, library + dir, name + 1);
    for (long i = 0; i < count; i++) {
        void *h = dlopen(path, RTLD_NOW);
        if (!h) {
            fprintf(stderr, "watch_helper: pad: %s\n", dlerror());
            return 2;
        }
        dlclose(h);
    }
    return 0;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "dlopen") && i + 1 < argc) {
            if (!dlopen(argv[++i], RTLD_NOW | RTLD_GLOBAL)) {
                fprintf(stderr, "watch_helper: dlopen: %s\n", dlerror());
                return 2;
            }
        } else if (!strcmp(argv[i], "pad") && i + 2 < argc) {
            int rc = pad(argv[i + 1], atol(argv[i + 2]));
            if (rc) return rc;
            i += 2;
        } else if (!strcmp(argv[i], "maps")) {
            char buf[64];
            printf("ready\n");
            fflush(stdout);
            while (fread(buf, 1, sizeof buf, stdin) > 0) {
            }
        } else if (!strcmp(argv[i], "run") && i + 1 < argc) {
            pid_t pid = fork();
            if (pid < 0) return 2;
            if (pid == 0) {
                execvp(argv[i + 1], argv + i + 1);
                perror("watch_helper: run");
                _exit(127);
            }
            int status = 0;
            while (waitpid(pid, &status, 0) < 0) {
            }
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        } else {
            fprintf(stderr, "watch_helper: unknown step %s\n", argv[i]);
            return 2;
        }
    }
    return 0;
}
