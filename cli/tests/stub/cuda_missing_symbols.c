/* Stand-in libcuda that lacks most of the driver API: cuInit and cuDeviceGetCount succeed
 * (one device) and cuDeviceGet answers; cuDeviceGetName and the rest are missing. For the
 * probe's check of entry points. */
typedef int CUresult;

CUresult cuInit(unsigned int flags) {
    (void)flags;
    return 0;
}

CUresult cuDeviceGetCount(int *count) {
    *count = 1;
    return 0;
}

CUresult cuDeviceGet(int *dev, int ordinal) {
    *dev = ordinal;
    return 0;
}
