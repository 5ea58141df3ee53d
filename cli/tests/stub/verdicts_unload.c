/* A library whose destructor crashes or never returns, as a GPU driver's teardown may as the
 * process unloads it at exit (fixtures/verdicts, VERDICTS_AT_EXIT=unload-segv|unload-spin). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((destructor)) static void teardown(void) {
    const char *mode = getenv("VERDICTS_AT_EXIT");
    if (mode && strcmp(mode, "unload-segv") == 0) {
        *(volatile int *)0 = 0;
    }
    if (mode && strcmp(mode, "unload-spin") == 0) {
        for (;;) {
            sleep(1);
        }
    }
}
