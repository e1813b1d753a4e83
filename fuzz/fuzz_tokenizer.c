// fuzz/fuzz_tokenizer.c: tokenizer_load (data.h) on a temp file for a model of the
// vocabulary the file's header states (so a well-formed file passes), then decoding every
// id (and some outside the vocab) as sampling does, and escaping the text for printing.
#include "fuzz_common.h"
#include "data/data.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fail_hook = fuzz_fail_jump;
    const char* path = fuzz_temp_file(data, size, ".tok");
    static Tokenizer tk;
    if (!setjmp(fuzz_jump)) {
        uint32_t vocab = 0;
        if (size >= 12) memcpy(&vocab, data + 8, 4);
        tokenizer_load(&tk, path, (int)vocab);
        int n = tk.vocab < 4096 ? tk.vocab : 4096;
        Bytes text = {NULL, 0, 0};
        for (int id = -2; id < n + 2; id++) tokenizer_decode(&tk, id, &text);
        tokenizer_decode(&tk, tk.eot, &text);
        char* shown = (char*)malloc(4 * text.n + 1);
        escape_text(shown, 4 * text.n + 1, text.bytes, text.n, 1);
        fputs(shown, fz_err_stream());
    }
    fuzz_reset();
    return 0;
}
