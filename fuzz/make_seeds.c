// fuzz/make_seeds.c: a small seed corpus for each harness: valid files and the usual
// corruptions (truncation, wrong magic/version, huge counts). Usage: make_seeds DIR
// writes DIR/{shard,tokenizer,device,ckpt}/seed_*.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void put(const char* dir, const char* target, const char* name, const void* p, size_t n) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, target);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/%s/seed_%s", dir, target, name);
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f)) { perror(path); exit(1); }
}

int main(int argc, char** argv) {
    const char* dir = argc > 1 ? argv[1] : "fuzz/corpus";
    mkdir(dir, 0755);
    static uint8_t b[1 << 16];
    // shard: byte 0 = reader/vocab selector (even: .bin with vocab 2 + 2*(b0>>1))
    int32_t* h = (int32_t*)(b + 1);
    uint16_t* tok = (uint16_t*)(b + 1 + 1024);
    memset(b, 0, sizeof(b));
    b[0] = 254;  // vocab 256
    h[0] = 20240520, h[1] = 1, h[2] = 64;
    for (int i = 0; i < 64; i++) tok[i] = (uint16_t)(i * 7 % 256);
    put(dir, "shard", "valid", b, 1 + 1024 + 128);
    put(dir, "shard", "truncated", b, 1 + 1024 + 100);
    put(dir, "shard", "short_header", b, 1 + 500);
    h[2] = 0x7fffffff; put(dir, "shard", "huge_count", b, 1 + 1024 + 128);
    h[2] = -3; put(dir, "shard", "negative_count", b, 1 + 1024 + 128);
    h[2] = 64, h[1] = 2; put(dir, "shard", "version", b, 1 + 1024 + 128);
    h[1] = 1, h[0] = 7; put(dir, "shard", "magic", b, 1 + 1024 + 128);
    h[0] = 20240520, tok[5] = 300; put(dir, "shard", "token_range", b, 1 + 1024 + 128);
    const char* text = "\x01" "alice sees the red apple near the mill. 12 plus 7 is 19. ";
    put(dir, "shard", "text", text, strlen(text));
    put(dir, "shard", "text_short", "\x01" "ab", 3);
    put(dir, "shard", "text_empty", "\x01", 1);
    // tokenizer: 256 uint32 header, then (len, bytes) per token
    memset(b, 0, sizeof(b));
    uint32_t* th = (uint32_t*)b;
    th[0] = 20240328, th[1] = 2, th[2] = 8, th[3] = 7;
    size_t n = 1024;
    for (int i = 0; i < 8; i++) { b[n++] = 2; b[n++] = 'a' + i; b[n++] = 'z' - i; }
    put(dir, "tokenizer", "valid_v2", b, n);
    th[1] = 1; put(dir, "tokenizer", "valid_v1", b, n);
    put(dir, "tokenizer", "truncated_entry", b, n - 2);
    put(dir, "tokenizer", "short_header", b, 300);
    th[2] = 1000000; put(dir, "tokenizer", "huge_vocab", b, n);
    th[2] = 8, th[0] = 1; put(dir, "tokenizer", "magic", b, n);
    th[0] = 20240328, b[1024] = 0; put(dir, "tokenizer", "empty_entry", b, n);
    // device file
    const char* dev[] = {"base = h100-sxm\npeak_tflops = 900\n# comment\nhbm_gbps = 3000\n",
                         "name = mine\nnvlink_gbps = 400\n",
                         "bogus = 1\n",
                         "peak_tflops = abc\n",
                         "peak_tflops = 1e400\n",
                         "peak_tflops =\n",
                         "= 3\n",
                         "hbm_gbps = 100\nbase = a100-80gb\n",
                         "dtype_bytes = 3\n"};
    for (int i = 0; i < (int)(sizeof(dev) / sizeof(dev[0])); i++) {
        char name[16];
        snprintf(name, sizeof(name), "%d", i);
        put(dir, "device", name, dev[i], strlen(dev[i]));
    }
    // ckpt (format version 2): the input is XORed onto a valid header, so zeros are the
    // valid template; the harness writes the true index and header checksum
    memset(b, 0, sizeof(b));
    put(dir, "ckpt", "template", b, 0);
    put(dir, "ckpt", "file", b, 1027);
    b[1024] = 1; put(dir, "ckpt", "scan", b, 1027);
    b[1024] = 2; memcpy(b + 1027, "ckpt_00000005.bin", 17); put(dir, "ckpt", "latest", b, 1027 + 32);
    b[1024] = 0, b[1025] = 0xfc, b[1026] = 0xff; put(dir, "ckpt", "short_by_4", b, 1027);  // delta -4
    b[1025] = 0, b[1026] = 0; memset(b + 1027 + 32, 0xff, 4); put(dir, "ckpt", "nan_body", b, 1027 + 36);
    memset(b + 1027 + 32, 0, 4);
    memcpy(b + 1027 + 32, "\x00\x00\x80\x3f", 4);
    put(dir, "ckpt", "ones_body", b, 1027 + 36);
    memset(b, 0, 1027 + 64);
    b[0] = 1; put(dir, "ckpt", "magic", b, 4);
    b[0] = 0, b[4] = 3; put(dir, "ckpt", "version", b, 8);  // 2 ^ 3: a version-1 file
    b[4] = 0, b[4 * 11 + 3] = 0x80; put(dir, "ckpt", "negative_step", b, 48);
    b[4 * 11 + 3] = 0, b[4 * 21 + 3] = 0x7f; put(dir, "ckpt", "n_full_huge", b, 88);
    // byte 1024 = 3: the header's checksum is computed after the change (the checks behind it)
    memset(b, 0, 1027 + 64);
    b[4 * 11] = 16, b[1024] = 3; put(dir, "ckpt", "signed_step_19", b, 1027);  // step 3 ^ 16 = 19
    b[4 * 11] = 0, b[4 * 11 + 3] = 0x80; put(dir, "ckpt", "signed_negative_step", b, 1027);
    b[4 * 11 + 3] = 0, b[4 * 27] = 1; put(dir, "ckpt", "signed_n_tensors", b, 1027);
    b[4 * 27] = 0, b[4 * 28] = 1; put(dir, "ckpt", "checksum_bit", b, 1027);
    return 0;
}
