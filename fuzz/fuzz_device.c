// fuzz/fuzz_device.c: the planner's device-file parser (profile_parse_file, planner.h).
// It reports errors through its return value (it does not call fail()), but the hook is
// set anyway so a fail() anywhere below is a normal return, not an exit.
#include "fuzz_common.h"
#include "planner/planner.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fail_hook = fuzz_fail_jump;
    const char* path = fuzz_temp_file(data, size, ".dev");
    if (!setjmp(fuzz_jump)) {
        DeviceProfile d;
        char err[512];
        err[0] = 0;
        int rc = profile_parse_file(path, &d, err, sizeof(err));
        if (rc != 0 && rc != -1) abort();
        if (rc == -1 && (!err[0] || !memchr(err, 0, sizeof(err)))) abort();  // an error always says why
    }
    fuzz_reset();
    return 0;
}
