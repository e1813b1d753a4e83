// fuzz/fuzz_tokenizer.c: tokenizer_load (data.h) on a temp file, then decoding every id
// (and some outside the vocab) as sampling does.
#include "fuzz_common.h"
#include "../data.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fail_hook = fuzz_fail_jump;
    const char* path = fuzz_temp_file(data, size, ".tok");
    static Tokenizer tk;
    if (!setjmp(fuzz_jump)) {
        tokenizer_load(&tk, path);
        FILE* out = fz_err_stream();
        int n = tk.vocab < 4096 ? tk.vocab : 4096;
        for (int id = -2; id < n + 2; id++) tokenizer_print(&tk, id, out);
        tokenizer_print(&tk, tk.eot, out);
    }
    fuzz_reset();
    return 0;
}
