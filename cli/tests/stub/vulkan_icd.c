/* Stand-in Vulkan driver (ICD) for the wgpu probe tests: fault injection, not a model of
 * Vulkan. The Vulkan loader loads it through a manifest named by VK_ICD_FILENAMES /
 * VK_DRIVER_FILES and calls its entry points while wgpu creates an instance.
 *
 * VULKAN_STUB selects the behaviour: segv (dereference null), hang (never return); unset, the
 * driver offers nothing and the loader carries on without it.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void say(const char *s) {
    ssize_t r = write(2, s, strlen(s));
    (void)r;
}

static void misbehave(void) {
    const char *m = getenv("VULKAN_STUB");
    if (!m) return;
    if (strcmp(m, "segv") == 0) {
        say("stub vulkan driver: about to dereference null\n");
        volatile int *p = (volatile int *)0;
        *p = 1;
    }
    if (strcmp(m, "hang") == 0) {
        say("stub vulkan driver: waiting forever\n");
        for (;;) pause();
    }
}

int vk_icdNegotiateLoaderICDInterfaceVersion(unsigned int *version) {
    misbehave();
    *version = 5;
    return 0;
}

void *vk_icdGetInstanceProcAddr(void *instance, const char *name) {
    (void)instance;
    (void)name;
    misbehave();
    return 0;
}
