/*
 * engine/convert.c: rwkv.cpp (RWKV-7) -> GGUF (llama.cpp's rwkv7), see
 * convert.h for the contract.
 *
 * The input is read whole and parsed into a table of tensors (name, type,
 * shape, data pointer into the input buffer) with every size checked
 * against the bytes left before anything is used. The output is built with
 * eng_gguf_writer; matrices point into the input buffer, vectors converted
 * to F32 live in buffers owned by the conversion until serialisation.
 *
 * Name map (rwkv.cpp -> GGUF; N the block):
 *   emb.weight -> token_embd.weight        blocks.0.ln0.* -> token_embd_norm.*
 *   ln_out.* -> output_norm.*              head.weight -> output.weight
 *   blocks.N.ln1.* -> blk.N.attn_norm.*    blocks.N.ln2.* -> blk.N.attn_norm_2.*
 *   att.x_rwkvag -> time_mix_lerp_fused    att.{w,a,v}{0,1,2} -> time_mix_{w,a,v}{0,1,2}
 *   att.g{1,2} -> time_mix_g{1,2}          att.{k_k,k_a,r_k} -> time_mix_{k_k,k_a,r_k}
 *   att.{receptance,key,value,output}.weight -> time_mix_{receptance,key,value,output}.weight
 *   att.ln_x.* -> time_mix_ln.*            ffn.x_k -> channel_mix_lerp_k
 *   ffn.{key,value}.weight -> channel_mix_{key,value}.weight
 * (every name without a suffix gets ".weight", as llama.cpp's converter does).
 */
#include "convert.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "sha256.h"
#include "status.h"
#include "util.h"

#define RWKVCPP_MAGIC 0x67676d66u
#define RWKV_VOCAB    256

// ----------------------------------------------------------------------------
// The input: header and tensor table

typedef struct rt_tensor {
    char        name[96];
    uint32_t    type;    /* 0 FP32, 1 FP16 (rwkv.cpp's data types) */
    int32_t     n_dims;
    int64_t     ne[4];   /* ggml order, dims past n_dims are 1 */
    int64_t     n;       /* elements */
    const void *data;
    size_t      off;     /* byte offset of the tensor's header, for messages */
} rt_tensor;

typedef struct conv {
    const char *path;
    char       *err;
    size_t      errlen;
    char       *bytes;
    size_t      nbytes;
    uint32_t    n_vocab, n_embd, n_layer, data_type;
    rt_tensor  *t;
    size_t      n_t, cap_t;
    void      **bufs;    /* converted data owned until serialisation */
    size_t      n_bufs;
} conv;

static uint32_t rd_u32(const char *p) {
    uint32_t v;
    memcpy(&v, p, 4);  /* rwkv.cpp writes machine byte order: little-endian here */
    return v;
}

static int bad(conv *c, size_t off, const char *field, const char *what) {
    eng_errf(c->err, c->errlen, "%s: offset %zu: %s: %s", c->path, off, field, what);
    return ENG_ERR_FORMAT;
}

static int parse(conv *c) {
    if (c->nbytes < 24) return bad(c, 0, "header", "file shorter than the 24-byte rwkv.cpp header");
    if (rd_u32(c->bytes) != RWKVCPP_MAGIC) return bad(c, 0, "magic", "not an rwkv.cpp model file (expected 0x67676d66)");
    const uint32_t version = rd_u32(c->bytes + 4);
    if (version != 100 && version != 101) {
        eng_errf(c->err, c->errlen, "%s: offset 4: version: %u not supported (100 and 101 are)", c->path, version);
        return ENG_ERR_UNSUPPORTED;
    }
    c->n_vocab = rd_u32(c->bytes + 8);
    c->n_embd = rd_u32(c->bytes + 12);
    c->n_layer = rd_u32(c->bytes + 16);
    c->data_type = rd_u32(c->bytes + 20);
    if (c->n_vocab < 1 || c->n_vocab > (1u << 24)) return bad(c, 8, "n_vocab", "out of range");
    if (c->n_embd < 1 || c->n_embd > (1u << 16)) return bad(c, 12, "n_embed", "out of range");
    if (c->n_layer < 1 || c->n_layer > 4096) return bad(c, 16, "n_layer", "out of range");
    if (c->data_type > 1) {
        eng_errf(c->err, c->errlen, "%s: offset 20: data_type: %u: only FP32 (0) and FP16 (1) files are supported "
                 "(quantized rwkv.cpp types are not)", c->path, c->data_type);
        return ENG_ERR_UNSUPPORTED;
    }
    size_t off = 24;
    while (off < c->nbytes) {
        const size_t start = off;
        if (c->nbytes - off < 12) return bad(c, off, "tensor header", "truncated");
        const int32_t n_dims = (int32_t)rd_u32(c->bytes + off);
        const int32_t key_len = (int32_t)rd_u32(c->bytes + off + 4);
        const uint32_t type = rd_u32(c->bytes + off + 8);
        off += 12;
        if (n_dims < 1 || n_dims > 4) return bad(c, start, "n_dims", "expected 1 to 4");
        if (key_len < 1 || key_len > 95) return bad(c, start + 4, "key_length", "expected 1 to 95");
        if (type > 1) {
            eng_errf(c->err, c->errlen, "%s: offset %zu: tensor type %u: only FP32 (0) and FP16 (1) are supported",
                     c->path, start + 8, type);
            return ENG_ERR_UNSUPPORTED;
        }
        if (c->nbytes - off < (size_t)n_dims * 4 + (size_t)key_len) return bad(c, off, "tensor shape/key", "truncated");
        rt_tensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}, .n = 1, .off = start};
        for (int32_t d = 0; d < n_dims; d++) {
            const int32_t v = (int32_t)rd_u32(c->bytes + off + 4 * (size_t)d);
            if (v < 1 || v > (1 << 24)) return bad(c, off + 4 * (size_t)d, "shape", "dimension out of range");
            t.ne[d] = v;
            t.n *= v;
        }
        off += (size_t)n_dims * 4;
        memcpy(t.name, c->bytes + off, (size_t)key_len);
        t.name[key_len] = '\0';
        if (strlen(t.name) != (size_t)key_len) return bad(c, off, "key", "contains a NUL byte");
        off += (size_t)key_len;
        const size_t nb = (size_t)t.n * (type == 0 ? 4 : 2);
        if (t.n > (int64_t)1 << 40 || c->nbytes - off < nb) {
            eng_errf(c->err, c->errlen, "%s: offset %zu: tensor %s: data truncated", c->path, off, t.name);
            return ENG_ERR_FORMAT;
        }
        t.data = c->bytes + off;
        off += nb;
        for (size_t i = 0; i < c->n_t; i++)
            if (!strcmp(c->t[i].name, t.name)) return bad(c, start, t.name, "duplicate tensor");
        if (c->n_t == c->cap_t) {
            size_t cap = c->cap_t ? 2 * c->cap_t : 512;
            rt_tensor *nt = realloc(c->t, cap * sizeof *nt);
            if (!nt) return ENG_ERR_NOMEM;
            c->t = nt;
            c->cap_t = cap;
        }
        c->t[c->n_t++] = t;
    }
    return ENG_OK;
}

static const rt_tensor *find(const conv *c, const char *name) {
    for (size_t i = 0; i < c->n_t; i++)
        if (!strcmp(c->t[i].name, name)) return &c->t[i];
    return NULL;
}

/* Tensor `name` with shape ne0 x ne1 x ne2 (ggml order, trailing 1s free). */
static int need(conv *c, const char *name, int64_t ne0, int64_t ne1, int64_t ne2, const rt_tensor **out) {
    const rt_tensor *t = find(c, name);
    if (!t) {
        eng_errf(c->err, c->errlen, "%s: tensor %s: missing (is this an RWKV-7 model?)", c->path, name);
        return ENG_ERR_FORMAT;
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != ne2 || t->ne[3] != 1) {
        eng_errf(c->err, c->errlen, "%s: offset %zu: tensor %s: shape [%lld, %lld, %lld], expected [%lld, %lld, %lld]",
                 c->path, t->off, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                 (long long)ne0, (long long)ne1, (long long)ne2);
        return ENG_ERR_FORMAT;
    }
    *out = t;
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// The output

/* Adds t under gguf_name with GGUF shape ne (n_dims); vectors become F32. */
static int emit(conv *c, eng_gguf_writer *w, const rt_tensor *t, const char *gguf_name, uint32_t n_dims,
                const int64_t *ne, bool vector) {
    const void *data = t->data;
    uint32_t type = t->type == 0 ? ENG_GGML_TYPE_F32 : ENG_GGML_TYPE_F16;
    if (vector && type != ENG_GGML_TYPE_F32) {  /* exact: every F16 is a float */
        float *f = malloc(sizeof(float) * (size_t)t->n);
        void **nb = realloc(c->bufs, (c->n_bufs + 1) * sizeof *nb);
        if (!f || !nb) {
            free(f);
            if (nb) c->bufs = nb;
            return ENG_ERR_NOMEM;
        }
        c->bufs = nb;
        c->bufs[c->n_bufs++] = f;
        eng_ggml_to_f32(type, data, f, t->n);
        data = f;
        type = ENG_GGML_TYPE_F32;
    }
    const size_t nbytes = (size_t)t->n * (type == ENG_GGML_TYPE_F32 ? 4 : 2);
    int rc = eng_gguf_writer_add_tensor(w, gguf_name, type, n_dims, ne, data, nbytes);
    if (rc != ENG_OK) eng_errf(c->err, c->errlen, "%s: tensor %s: cannot add (%s)", c->path, gguf_name,
                               eng_status_str(rc));
    return rc;
}

/* Byte b as llama.cpp's RWKV tokenizer stores token text (llama_unescape_rwkv_token
 * reverses it): Python's repr of the byte string without b'' quotes: \t \n \r
 * \\ escaped, printable ASCII as is, every other byte \xHH (lower-case hex). */
static void rwkv_token_text(int b, char out[8]) {
    if (b == '\t') snprintf(out, 8, "\\t");
    else if (b == '\n') snprintf(out, 8, "\\n");
    else if (b == '\r') snprintf(out, 8, "\\r");
    else if (b == '\\') snprintf(out, 8, "\\\\");
    else if (b >= 0x20 && b < 0x7f) snprintf(out, 8, "%c", b);
    else snprintf(out, 8, "\\x%02x", b);
}

static int write_vocab(conv *c, eng_gguf_writer *w) {
    char text[RWKV_VOCAB][8];
    const char *toks[RWKV_VOCAB];
    int32_t types[RWKV_VOCAB];
    for (int b = 0; b < RWKV_VOCAB; b++) {
        rwkv_token_text(b, text[b]);
        toks[b] = text[b];
        types[b] = 1;  /* NORMAL */
    }
    int rc = eng_gguf_writer_set_str(w, "tokenizer.ggml.model", "rwkv");
    if (!rc) rc = eng_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", RWKV_VOCAB, toks, NULL);
    if (!rc) rc = eng_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", ENG_GGUF_TYPE_INT32, RWKV_VOCAB, types);
    return rc;
}

static int build(conv *c, eng_gguf_writer *w, const char *name) {
    const int64_t D = c->n_embd, V = c->n_vocab, L = c->n_layer;
    const rt_tensor *t;
    int rc;
    if (V != RWKV_VOCAB) {
        eng_errf(c->err, c->errlen, "%s: offset 8: n_vocab: %lld: only byte-level models (256 tokens) are "
                 "supported: the World vocabulary is not in the file", c->path, (long long)V);
        return ENG_ERR_UNSUPPORTED;
    }
    if (!find(c, "blocks.0.att.r_k")) {
        eng_errf(c->err, c->errlen, "%s: tensor blocks.0.att.r_k: missing: not an RWKV-7 model (RWKV v4, v5 and v6 "
                 "files are not supported)", c->path);
        return ENG_ERR_UNSUPPORTED;
    }
    /* shapes: heads from r_k [S, H], LoRA ranks from the first layer, F from ffn.key */
    const rt_tensor *rk = find(c, "blocks.0.att.r_k");
    const int64_t S = rk->ne[0], H = rk->ne[1];
    if (rk->n_dims != 2 || S * H != D) return bad(c, rk->off, "blocks.0.att.r_k", "expected [head_size, n_head] with head_size * n_head = n_embed");
    const rt_tensor *tw1 = find(c, "blocks.0.att.w1"), *ta1 = find(c, "blocks.0.att.a1");
    const rt_tensor *tg1 = find(c, "blocks.0.att.g1"), *tfk = find(c, "blocks.0.ffn.key.weight");
    const rt_tensor *tv1 = find(c, L > 1 ? "blocks.1.att.v1" : "blocks.0.att.a1");
    if (!tw1 || !ta1 || !tg1 || !tfk || !tv1) {
        eng_errf(c->err, c->errlen, "%s: tensors blocks.0.att.w1/a1/g1, blocks.1.att.v1, blocks.0.ffn.key.weight: "
                 "missing", c->path);
        return ENG_ERR_FORMAT;
    }
    const int64_t Rw = tw1->ne[1], Ra = ta1->ne[1], Rv = tv1->ne[1], Rg = tg1->ne[1], F = tfk->ne[1];

    rc = eng_gguf_writer_set_str(w, "general.architecture", "rwkv7");
    if (!rc) rc = eng_gguf_writer_set_str(w, "general.name", name);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "general.alignment", ENG_GGUF_DEFAULT_ALIGNMENT);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "general.file_type", c->data_type == 0 ? 0 : 1);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "rwkv7.context_length", 1048576);  /* "RWKV isn't context limited" */
    if (!rc) rc = eng_gguf_writer_set_u32(w, "rwkv7.embedding_length", (uint32_t)D);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "rwkv7.block_count", (uint32_t)L);
    if (!rc) rc = eng_gguf_writer_set_f32(w, "rwkv7.attention.layer_norm_epsilon", 1e-5f);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "rwkv7.wkv.head_size", (uint32_t)S);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "rwkv7.attention.decay_lora_rank", (uint32_t)Rw);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "rwkv7.attention.iclr_lora_rank", (uint32_t)Ra);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "rwkv7.attention.value_residual_mix_lora_rank", (uint32_t)Rv);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "rwkv7.attention.gate_lora_rank", (uint32_t)Rg);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "rwkv7.feed_forward_length", (uint32_t)F);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "rwkv7.attention.head_count", 0);  /* required by llama.cpp, unused */
    if (!rc) rc = eng_gguf_writer_set_u32(w, "rwkv7.vocab_size", (uint32_t)V);
    if (!rc) rc = eng_gguf_writer_set_str(w, "kvreplay.convert.from", "rwkv.cpp");
    uint8_t sha[32];
    char hex[65];
    eng_sha256(c->bytes, c->nbytes, sha);
    eng_sha256_hex(sha, hex);
    if (!rc) rc = eng_gguf_writer_set_str(w, "kvreplay.convert.source_sha256", hex);
    if (!rc) rc = write_vocab(c, w);
    if (rc) return rc;

    const int64_t ne_d[1] = {D}, ne_dv[2] = {D, V};
    if ((rc = need(c, "emb.weight", D, V, 1, &t)) || (rc = emit(c, w, t, "token_embd.weight", 2, ne_dv, false))) return rc;
    if ((rc = need(c, "blocks.0.ln0.weight", D, 1, 1, &t)) || (rc = emit(c, w, t, "token_embd_norm.weight", 1, ne_d, true))) return rc;
    if ((rc = need(c, "blocks.0.ln0.bias", D, 1, 1, &t)) || (rc = emit(c, w, t, "token_embd_norm.bias", 1, ne_d, true))) return rc;
    char src[128], dst[128];
    for (int64_t il = 0; il < L; il++) {
        /* {source suffix, GGUF suffix, expected [ne0, ne1, ne2], GGUF dims, vector} */
        struct { const char *from, *to; int64_t ne0, ne1, ne2; uint32_t gd; bool vec; } map[] = {
            {"ln1.weight", "attn_norm.weight", D, 1, 1, 1, true},
            {"ln1.bias", "attn_norm.bias", D, 1, 1, 1, true},
            {"ln2.weight", "attn_norm_2.weight", D, 1, 1, 1, true},
            {"ln2.bias", "attn_norm_2.bias", D, 1, 1, 1, true},
            {"att.x_rwkvag", "time_mix_lerp_fused.weight", D, 1, 6, 4, true},
            {"att.w0", "time_mix_w0.weight", D, 1, 1, 1, true},
            {"att.w1", "time_mix_w1.weight", D, Rw, 1, 2, false},
            {"att.w2", "time_mix_w2.weight", Rw, D, 1, 2, false},
            {"att.a0", "time_mix_a0.weight", D, 1, 1, 1, true},
            {"att.a1", "time_mix_a1.weight", D, Ra, 1, 2, false},
            {"att.a2", "time_mix_a2.weight", Ra, D, 1, 2, false},
            {"att.v0", "time_mix_v0.weight", D, 1, 1, 1, true},
            {"att.v1", "time_mix_v1.weight", D, Rv, 1, 2, false},
            {"att.v2", "time_mix_v2.weight", Rv, D, 1, 2, false},
            {"att.g1", "time_mix_g1.weight", D, Rg, 1, 2, false},
            {"att.g2", "time_mix_g2.weight", Rg, D, 1, 2, false},
            {"att.k_k", "time_mix_k_k.weight", D, 1, 1, 1, true},
            {"att.k_a", "time_mix_k_a.weight", D, 1, 1, 1, true},
            {"att.r_k", "time_mix_r_k.weight", S, H, 1, 1, true},
            {"att.key.weight", "time_mix_key.weight", D, D, 1, 2, false},
            {"att.value.weight", "time_mix_value.weight", D, D, 1, 2, false},
            {"att.receptance.weight", "time_mix_receptance.weight", D, D, 1, 2, false},
            {"att.ln_x.weight", "time_mix_ln.weight", D, 1, 1, 1, true},
            {"att.ln_x.bias", "time_mix_ln.bias", D, 1, 1, 1, true},
            {"att.output.weight", "time_mix_output.weight", D, D, 1, 2, false},
            {"ffn.x_k", "channel_mix_lerp_k.weight", D, 1, 1, 3, true},
            {"ffn.key.weight", "channel_mix_key.weight", D, F, 1, 2, false},
            {"ffn.value.weight", "channel_mix_value.weight", F, D, 1, 2, false},
        };
        for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
            const char *from = map[i].from;
            if (il == 0 && !strncmp(from, "att.v", 5) && from[5] != 'a') {
                /* layer 0 has no v0/v1/v2: llama.cpp's converter writes a0/a1/a2 there (unused) */
                static const char *const a_of[3] = {"att.a0", "att.a1", "att.a2"};
                from = a_of[from[5] - '0'];
            }
            snprintf(src, sizeof src, "blocks.%lld.%s", (long long)il, from);
            snprintf(dst, sizeof dst, "blk.%lld.%s", (long long)il, map[i].to);
            const size_t mi = from == map[i].from ? i : i - 3;  /* the a-row: its shape */
            const int64_t ne0 = map[mi].ne0, ne1 = map[mi].ne1;
            if ((rc = need(c, src, ne0, ne1, map[i].ne2, &t)) != ENG_OK) return rc;
            int64_t gne[4] = {ne0, ne1, 1, 1};
            if (map[i].gd == 4) { gne[1] = 1; gne[2] = 1; gne[3] = 6; }      /* [D, 1, 1, 6] */
            else if (map[i].gd == 3) { gne[1] = 1; gne[2] = 1; }             /* [D, 1, 1] */
            else if (map[i].gd == 1) gne[0] = ne0 * ne1 * map[i].ne2;        /* flat [D] */
            if ((rc = emit(c, w, t, dst, map[i].gd, gne, map[i].vec)) != ENG_OK) return rc;
        }
    }
    if ((rc = need(c, "ln_out.weight", D, 1, 1, &t)) || (rc = emit(c, w, t, "output_norm.weight", 1, ne_d, true))) return rc;
    if ((rc = need(c, "ln_out.bias", D, 1, 1, &t)) || (rc = emit(c, w, t, "output_norm.bias", 1, ne_d, true))) return rc;
    if ((rc = need(c, "head.weight", D, V, 1, &t)) || (rc = emit(c, w, t, "output.weight", 2, ne_dv, false))) return rc;
    /* every tensor of the file must have been used: anything else is a format we do not know */
    const size_t expected = 6 + (size_t)L * 28 - 3;  /* emb, ln0 x2, ln_out x2, head; 28 per block but v0-2 of block 0 */
    if (c->n_t != expected) {
        eng_errf(c->err, c->errlen, "%s: %zu tensors, an RWKV-7 model of %lld blocks has %zu: unknown tensors",
                 c->path, c->n_t, (long long)L, expected);
        return ENG_ERR_UNSUPPORTED;
    }
    return ENG_OK;
}

int eng_convert_rwkvcpp_to_buffer(const char *in_path, void **buf, size_t *n, char *err, size_t errlen) {
    *buf = NULL;
    *n = 0;
    conv c = {.path = in_path, .err = err, .errlen = errlen};
    eng_gguf_writer *w = NULL;
    int rc = eng_read_file(in_path, &c.bytes, &c.nbytes, err, errlen);
    if (rc != ENG_OK) return rc;
    if ((rc = parse(&c)) != ENG_OK) goto out;
    if (!(w = eng_gguf_writer_new(3, ENG_GGUF_DEFAULT_ALIGNMENT))) { rc = ENG_ERR_NOMEM; goto out; }
    char name[96];
    const char *base = strrchr(in_path, '/');
    base = base ? base + 1 : in_path;
    int len = (int)strcspn(base, ".");  /* general.name: the file's base name without extension */
    if (len == 0) len = (int)strlen(base);
    snprintf(name, sizeof name, "%.*s", len, base);
    if ((rc = build(&c, w, name)) != ENG_OK) goto out;
    rc = eng_gguf_writer_to_buffer(w, buf, n);
out:
    if (rc == ENG_ERR_NOMEM) eng_errf(err, errlen, "%s: out of memory", in_path);
    eng_gguf_writer_free(w);
    for (size_t i = 0; i < c.n_bufs; i++) free(c.bufs[i]);
    free(c.bufs);
    free(c.t);
    free(c.bytes);
    return rc;
}

int eng_convert_rwkvcpp(const char *in_path, const char *out_path, char *err, size_t errlen) {
    void *buf;
    size_t n;
    int rc = eng_convert_rwkvcpp_to_buffer(in_path, &buf, &n, err, errlen);
    if (rc != ENG_OK) return rc;
    rc = eng_write_atomic(out_path, buf, n, err, errlen);
    free(buf);
    return rc;
}
