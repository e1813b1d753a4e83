// fuzz/fuzz_shard.c: the token readers of data.h on a temp file.
// Input: byte 0 picks the reader (bit 0: 0 = read_shard on a .bin shard, 1 = stream_open
// on a .txt file) and the vocab (bits 1..: 2..257 for shards); the rest is the file.
// An accepted stream is then cut into batches as the trainer does, and every token must
// be inside the vocab.
#include "fuzz_common.h"
#include "data/data.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    fail_hook = fuzz_fail_jump;
    int text = data[0] & 1, vocab = text ? 257 : 2 + (data[0] >> 1) * 2;
    const char* path = fuzz_temp_file(data + 1, size - 1, text ? ".txt" : ".bin");
    static TokenStream ts;
    if (!setjmp(fuzz_jump)) {
        memset(&ts, 0, sizeof(ts));
        if (text) stream_open(&ts, path, vocab, "--data");
        else read_shard(&ts, path, vocab, "--data");
        int T = 4, B = 3, inputs[12], targets[12];
        if (stream_n_seq(&ts, T) >= 1) {
            for (size_t s = 0; s < 4; s++) {
                stream_batch(&ts, T, s * B, B, inputs, targets, NULL);
                for (int i = 0; i < B * T; i++)
                    if (inputs[i] < 0 || inputs[i] >= vocab || targets[i] < 0 || targets[i] >= vocab) abort();
            }
            TokenStream val;
            stream_split(&ts, &val, 0.05);
            if (ts.n_tokens + val.n_tokens == 0) abort();
        }
    }
    fuzz_reset();
    return 0;
}
