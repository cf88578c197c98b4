/* cleave: LLM inference for llama-family GGUF models on CPUs and GPUs.
 * This header is the whole public API. Every fallible call returns a
 * cleave_status; on failure cleave_last_error() holds a human-readable
 * message (thread-local). Nothing in the library aborts on bad input or on
 * memory exhaustion. */
#ifndef CLEAVE_H
#define CLEAVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cleave_status {
    CLEAVE_OK = 0,
    CLEAVE_ERR_INVALID_ARG,  /* a caller passed something impossible */
    CLEAVE_ERR_IO,           /* open/read/write/mmap failed */
    CLEAVE_ERR_FORMAT,       /* malformed or corrupt file */
    CLEAVE_ERR_UNSUPPORTED,  /* valid, but not something cleave runs (arch, type, version) */
    CLEAVE_ERR_OOM,          /* an allocation failed or a memory budget was exceeded */
    CLEAVE_ERR_CONTEXT_FULL, /* more tokens than the context holds */
    CLEAVE_ERR_DEVICE,       /* a device or driver error */
    CLEAVE_ERR_INTERNAL,     /* a bug: please report */
} cleave_status;

/* Message for the last failure on this thread ("" if none). */
const char *cleave_last_error(void);
/* Short fixed name of a status, e.g. "format error". */
const char *cleave_status_name(cleave_status st);

/* Element types, numbered as in GGUF/ggml so files map directly. */
typedef enum cleave_type {
    CLEAVE_TYPE_F32 = 0,
    CLEAVE_TYPE_F16 = 1,
    CLEAVE_TYPE_Q4_0 = 2,
    CLEAVE_TYPE_Q4_1 = 3,
    CLEAVE_TYPE_Q5_0 = 6,
    CLEAVE_TYPE_Q5_1 = 7,
    CLEAVE_TYPE_Q8_0 = 8,
    CLEAVE_TYPE_Q2_K = 10,
    CLEAVE_TYPE_Q3_K = 11,
    CLEAVE_TYPE_Q4_K = 12,
    CLEAVE_TYPE_Q5_K = 13,
    CLEAVE_TYPE_Q6_K = 14,
    CLEAVE_TYPE_IQ4_NL = 20,
    CLEAVE_TYPE_IQ4_XS = 23,
    CLEAVE_TYPE_BF16 = 30,
    CLEAVE_TYPE_MXFP4 = 39,
} cleave_type;

/* Parses a type name as ggml spells it: "f32", "f16", "bf16", "q8_0",
 * "q4_0", "q4_1", "q5_0", "q5_1", "q2_K".."q6_K" (any case), "iq4_nl",
 * "iq4_xs", "mxfp4". */
cleave_status cleave_type_from_name(const char *name, cleave_type *out);
const char *cleave_type_name(cleave_type t);

typedef struct cleave_model cleave_model;
typedef struct cleave_context cleave_context;
typedef struct cleave_sampler cleave_sampler;

/* Progress callback for long work (loading, converting). Return false to
 * cancel. fraction is in [0,1]. */
typedef bool (*cleave_progress_fn)(float fraction, void *user);

/* ---- models ---------------------------------------------------------- */

typedef struct cleave_model_params {
    cleave_progress_fn progress; /* may be NULL */
    void *progress_user;
    /* the vocabulary alone (a vocab-only GGUF works): tokenizing and
     * pieces, no contexts */
    bool vocab_only;
} cleave_model_params;

cleave_model_params cleave_model_default_params(void);
cleave_status cleave_model_load(const char *path, const cleave_model_params *params,
                                cleave_model **out);
void cleave_model_free(cleave_model *model);

typedef struct cleave_model_desc {
    char arch[32];        /* "llama", "qwen2", "qwen3" */
    char name[128];       /* general.name or "" */
    uint32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx_train;
    float rope_freq_base, norm_eps;
    bool rope_neox, tied_output, has_rope_freqs;
    uint64_t n_params;       /* parameters in all tensors */
    uint64_t weight_bytes;   /* bytes of all tensors as stored */
    cleave_type weight_type; /* the type of most matrix bytes */
} cleave_model_desc;

cleave_status cleave_model_describe(const cleave_model *model, cleave_model_desc *out);
/* Bytes of KV cache per token of context for a given KV type. */
size_t cleave_model_kv_bytes_per_token(const cleave_model *model, cleave_type kv_type);

/* ---- tokens ------------------------------------------------------------ */

int32_t cleave_token_bos(const cleave_model *model); /* -1 if none */
int32_t cleave_token_eos(const cleave_model *model); /* -1 if none */
bool cleave_token_is_eog(const cleave_model *model, int32_t token);

/* Tokenizes text. add_bos prepends BOS when the vocab has one. On success
 * *n_out is the count; if it exceeds cap, CLEAVE_ERR_INVALID_ARG is returned
 * with *n_out set to the needed capacity. */
cleave_status cleave_tokenize(const cleave_model *model, const char *text, size_t len,
                              bool add_bos, int32_t *tokens, size_t cap, size_t *n_out);
/* As llama.cpp's llama_tokenize: add_special adds BOS and EOS where the
 * vocabulary's metadata asks for them; parse_special takes control tokens
 * written in the text (<|im_start|>, <s>, ...) as those tokens, never
 * otherwise (user-defined tokens always are). Same contract as
 * cleave_tokenize. */
cleave_status cleave_tokenize_ex(const cleave_model *model, const char *text, size_t len, bool add_special,
                                 bool parse_special, int32_t *tokens, size_t cap, size_t *n_out);
/* A prompt's BOS: where the vocabulary's metadata asks for it
 * (tokenizer.ggml.add_bos_token; false when a BPE vocabulary leaves it
 * out, as llama.cpp reads it), always, or never. */
typedef enum { CLEAVE_BOS_AUTO = 0, CLEAVE_BOS_ALWAYS, CLEAVE_BOS_NEVER } cleave_bos;
/* A prompt's tokens, BOS as `bos` says (with AUTO also EOS where the
 * metadata asks, as llama.cpp's tools tokenize); parse_special as in
 * cleave_tokenize_ex. What `cleave run` and `cleave serve` feed the model
 * (their --bos / --no-bos). Same contract as cleave_tokenize. */
cleave_status cleave_tokenize_prompt(const cleave_model *model, const char *text, size_t len, cleave_bos bos,
                                     bool parse_special, int32_t *tokens, size_t cap, size_t *n_out);
/* Text of one token for streaming output; prev is the token before it (-1 at
 * the start) so a leading space after BOS is dropped as SentencePiece does.
 * Writes up to cap bytes (no terminator) and sets *n_out. */
cleave_status cleave_token_to_piece(const cleave_model *model, int32_t prev, int32_t token,
                                    char *buf, size_t cap, size_t *n_out);

/* ---- contexts ----------------------------------------------------------- */

/* How a model spreads over several devices: `none` keeps it on the main
 * device; `layer` gives each device a contiguous range of layers; `tensor`
 * splits every layer across the devices (kv heads, FFN rows, vocab rows)
 * with an all-reduce after the o and down projections. */
typedef enum cleave_split_mode {
    CLEAVE_SPLIT_NONE = 0,
    CLEAVE_SPLIT_LAYER = 1,
    CLEAVE_SPLIT_TENSOR = 2,
} cleave_split_mode;

/* The most devices a context spreads over. */
#define CLEAVE_MAX_DEVICES 16

/* cleave_context_params.kv_type_v: the V cache takes the K cache's type. */
#define CLEAVE_KV_TYPE_AS_K ((cleave_type)-1)

typedef struct cleave_context_params {
    uint32_t n_ctx;        /* cells of KV cache; 0 = the model's training context (capped at 4096) */
    uint32_t n_batch;      /* most tokens in one forward pass; 0 = 512 */
    /* layer split: a pass of more tokens runs as a pipeline of micro-batches
     * of this many, so the devices work at once; 0 = no pipeline */
    uint32_t n_ubatch;
    /* CPU threads of each CPU device; 0 = the machine's cores divided
     * among the context's CPU devices (at least 1 each), so cpu:N does not
     * run N pools of every core against each other */
    int n_threads;
    /* K cache type: f32, f16, bf16, q8_0, q5_0 or q4_0 (the quantized
     * types need a head size that is a multiple of 32) */
    cleave_type kv_type;
    cleave_type kv_type_v; /* V cache type, as kv_type; CLEAVE_KV_TYPE_AS_K (the default): kv_type */
    /* "cpu" (default when NULL), "cuda:N", "cpu:N" (N virtual CPU devices
     * sharing the machine, each with its own memory accounting), or a
     * comma list such as "cuda:0,cuda:1" */
    const char *devices;
    cleave_split_mode split_mode; /* with several devices; default none */
    const float *shares;   /* n_shares per-device shares (layer, tensor); NULL = equal */
    size_t n_shares;
    int main_device;       /* the device index for split mode none */
    const size_t *budgets; /* n_budgets per-device byte limits (0 = none), emulating smaller cards */
    size_t n_budgets;
    /* fit: shrink the context (not below fit_min_ctx; 0 = 512) until the
     * plan fits every device with 5% to spare (both phases, and the switch
     * between them, with a prefill_split_mode), and fit the shares of a
     * phase given none to what each device has left for that mode once
     * what it needs whatever its share is counted; off: the plan must fit
     * as asked (equal shares where none are given) */
    bool fit;
    uint32_t fit_min_ctx;
    cleave_progress_fn progress; /* weight upload progress, may be NULL */
    void *progress_user;
    /* a split-mode switch keeps the placement it leaves on the devices
     * (while they hold both), so switching back moves only the KV cache */
    bool keep_both_placements;
    /* A KV cache in two tiers: cells [0, kv_vram_cells) of every layer's K
     * and V in device memory, the rest in pinned host memory in the same
     * address range, read through a staging buffer in device memory; the
     * output is bit-identical. Rounded down to the device's granularity.
     * CLEAVE_KV_VRAM_ALL (the default): all in device memory;
     * CLEAVE_KV_VRAM_AUTO: the most that fits each device's budget. */
    int64_t kv_vram_cells;
    /* Sequences 0..seq_regions-1 each take their cells from a region of
     * n_ctx / seq_regions cells of their own (at most that many tokens
     * each), so a decode step of some sequences reads only their cells
     * while others keep theirs cached (a server's slots); the rest share
     * what is left. 0 (the default): one pool for every sequence. */
    uint32_t seq_regions;
    /* Each phase its own placement: prompts processed under
     * prefill_split_mode with prefill_shares (n_prefill_shares, one per
     * device; NULL: fitted with fit, else equal), answers generated under
     * split_mode with shares (cleave_context_set_phase moves between
     * them). The context is made in the prefill phase, with a context
     * size both phases hold. With fit, a phase without shares of its own
     * is fitted to the budgets for its mode, and a switch that could not
     * fit a device at its fullest point is known when the context is made
     * (cleave_context_placement). CLEAVE_SPLIT_AS_GENERATE (the default):
     * one placement for both phases. */
    cleave_split_mode prefill_split_mode;
    const float *prefill_shares;
    size_t n_prefill_shares;
} cleave_context_params;
#define CLEAVE_SPLIT_AS_GENERATE ((cleave_split_mode)-1)
#define CLEAVE_KV_VRAM_ALL  (-1)
#define CLEAVE_KV_VRAM_AUTO (-2)

cleave_context_params cleave_context_default_params(void);
cleave_status cleave_context_new(cleave_model *model, const cleave_context_params *params,
                                 cleave_context **out);
void cleave_context_free(cleave_context *ctx);
uint32_t cleave_context_n_ctx(const cleave_context *ctx);
/* Moves a live context to another split mode on the same devices
 * (shares: n_shares, one per device; NULL: fitted as the context was, or
 * equal for a context made without fit), keeping its sequences, positions
 * and logits, so generation continues where prefill left off. A switch
 * whose fullest point would pass a device's budget is refused before
 * anything moves. On failure (the devices cannot hold the new placement,
 * say) the context is left as it was and stays usable in its old mode;
 * the error says why. */
cleave_status cleave_context_set_split_mode(cleave_context *ctx, cleave_split_mode mode,
                                            const float *shares, size_t n_shares);
cleave_split_mode cleave_context_split_mode(const cleave_context *ctx);
/* The two phases of a context made with a prefill_split_mode. */
typedef enum cleave_phase {
    CLEAVE_PHASE_PREFILL = 0,
    CLEAVE_PHASE_GENERATE = 1,
} cleave_phase;
/* Moves the context to the placement of a phase (its mode and shares, as
 * given or fitted), in place like cleave_context_set_split_mode. A switch
 * found not to fit when the context was made is refused at once
 * (CLEAVE_ERR_OOM, the message saying why and what would fit); the
 * context then stays usable where it is. Nothing to do where the phases
 * share one placement. */
cleave_status cleave_context_set_phase(cleave_context *ctx, cleave_phase phase);
cleave_phase cleave_context_phase(const cleave_context *ctx);
/* Where each phase of a context goes, per device, and whether the switch
 * between them fits: what cleave_context_placement reports of a context
 * and cleave_placement_preview of one that is not made yet. */
typedef struct cleave_phase_placement {
    cleave_split_mode mode;
    bool fits;                        /* the phase has a placement at n_ctx */
    double shares[CLEAVE_MAX_DEVICES]; /* the shares placed (given or fitted); layer and tensor */
    size_t weights[CLEAVE_MAX_DEVICES], kv[CLEAVE_MAX_DEVICES], compute[CLEAVE_MAX_DEVICES]; /* device memory */
    size_t kv_host[CLEAVE_MAX_DEVICES]; /* a tiered KV cache's host part */
    uint32_t kv_vram_cells;             /* cells of each layer in device memory */
    /* tensor: each device's kv heads and FFN rows (of each expert, in a
     * mixture), cut in units of head_align heads and ff_align rows (the
     * quant blocks of the o and down projections' columns), so a device
     * with a share can hold none where the units are fewer than the devices */
    uint32_t kv_heads[CLEAVE_MAX_DEVICES], ff_rows[CLEAVE_MAX_DEVICES];
    uint32_t head_align, ff_align;
} cleave_phase_placement;
typedef struct cleave_placement_report {
    size_t n_devices;
    char device[CLEAVE_MAX_DEVICES][64];
    size_t budget[CLEAVE_MAX_DEVICES]; /* bytes; 0 = unlimited */
    uint32_t n_ctx, n_batch;           /* the context both phases hold */
    bool two_phases;                   /* the phases' placements differ */
    cleave_phase_placement phase[2];   /* [CLEAVE_PHASE_PREFILL], [CLEAVE_PHASE_GENERATE] */
    /* each device's fullest point in the switch to that phase (the pieces
     * of both placements while they move, beside what each holds besides
     * them), and whether it stays within every budget */
    size_t switch_peak[2][CLEAVE_MAX_DEVICES];
    bool switch_fits[2];
    /* the bytes each device sends and receives over the links in that
     * switch, the context full (weights, then K and V of n_ctx cells;
     * what stays on a device not counted): the copies' time is at least
     * the larger of a device's two over its link's bandwidth */
    size_t switch_bytes_out[2][CLEAVE_MAX_DEVICES], switch_bytes_in[2][CLEAVE_MAX_DEVICES];
    char why[1024]; /* when the switch to generation cannot happen: why, and what would let it */
    /* the largest context that fits (with fit: 5% of each budget free,
     * shares fitted where none are given) under none, layer and tensor
     * alone, and under the two phases with the switch between them; up to
     * the larger of the context asked and the model's training context; 0:
     * none */
    uint32_t largest_ctx[3], largest_ctx_phases;
} cleave_placement_report;
cleave_status cleave_context_placement(const cleave_context *ctx, cleave_placement_report *out);
/* The placement a context of these parameters would get, computed from
 * the model's shapes and the devices' budgets without placing anything:
 * "will it fit" before the weights are loaded. Fails as
 * cleave_context_new would (a prefill phase that cannot be placed). */
cleave_status cleave_placement_preview(cleave_model *model, const cleave_context_params *params,
                                       cleave_placement_report *out);
/* "none", "layer" or "tensor" ("?" for a value outside the enum). */
const char *cleave_split_mode_name(cleave_split_mode mode);
/* What the context's last split-mode switch moved: the bytes that reached
 * and left each device (weights and KV cache; a copy within a device
 * counts on both sides), the KV cache's share, and how long it took,
 * with where the time went: making the new placement's tables and
 * buffers (seconds_prepare), allocating each piece's new buffers and
 * issuing its copies (seconds_alloc), waiting for the copies
 * (seconds_copy), freeing the old pieces (seconds_free); the rest is the
 * bookkeeping around them. Zeros before any switch. */
typedef struct cleave_switch_report {
    size_t n_devices;
    size_t bytes_in[CLEAVE_MAX_DEVICES], bytes_out[CLEAVE_MAX_DEVICES];
    /* of those, what crossed between devices (over their link: the
     * copies' least time is a device's larger direction over its
     * bandwidth; cleave_placement_report's switch_bytes_* predict these
     * for a full context) */
    size_t peer_in[CLEAVE_MAX_DEVICES], peer_out[CLEAVE_MAX_DEVICES];
    size_t kv_bytes;
    double seconds;
    double seconds_prepare, seconds_alloc, seconds_copy, seconds_free;
} cleave_switch_report;
cleave_status cleave_context_switch_report(const cleave_context *ctx, cleave_switch_report *out);
/* Bytes a tiered KV cache (kv_vram_cells) has copied from its host part
 * into device staging since the context was made, on all devices and
 * across split-mode switches: what the host tier cost in transfers. 0 for
 * an untiered cache. Read it from the thread that decodes. */
cleave_status cleave_context_kv_staged(const cleave_context *ctx, uint64_t *bytes);
/* Prefill under one split mode and generation under another: what pays.
 * cleave_psm_calibrate measures, on a context of two or more devices, the
 * prefill rate of prompts of pp[i] tokens and the generation rate at
 * context depths depths[i] under the layer and the tensor split, and the
 * cost of switching between them (fixed, and per cached token), and
 * writes them to a small text file; the context ends in layer mode with
 * an empty cache. progress (may be NULL) gets the fraction done.
 * cleave_psm_decide reads such a file and picks, for a request of `prompt`
 * tokens and n_gen generated, the modes of the two phases: the fastest
 * predicted plan, where a plan with a switch must beat staying in one
 * mode by `margin` (a fraction, e.g. 0.02). */
cleave_status cleave_psm_calibrate(cleave_context *ctx, const uint32_t *pp, size_t n_pp,
                                   const uint32_t *depths, size_t n_depths, const char *path,
                                   cleave_progress_fn progress, void *user);
typedef struct cleave_psm_decision {
    cleave_split_mode prefill, generate;
    /* predicted seconds: layer, tensor, layer then tensor, tensor then layer */
    double seconds[4];
} cleave_psm_decision;
cleave_status cleave_psm_decide(const char *rates_path, uint32_t prompt, uint32_t n_gen,
                                double margin, cleave_psm_decision *out);
/* The same among the plans with allowed[i] (in the order of seconds[]; NULL:
 * all), e.g. leaving out a switch that cannot fit the devices
 * (cleave_placement_preview's switch_fits). */
cleave_status cleave_psm_decide_among(const char *rates_path, uint32_t prompt, uint32_t n_gen, double margin,
                                      const bool allowed[4], cleave_psm_decision *out);
/* Several sequences share a context, and a switch moves them all. The
 * gate says which mode to run a step in: the prefill mode when every
 * active sequence is processing its prompt, the generation mode when
 * every one is generating, and, while phases are mixed (a prompt arriving
 * while others generate), the mode the context is in. It never switches
 * within min_dwell steps of its last switch, so sequences entering and
 * leaving prefill in turn cannot make it thrash. Start it with the
 * context's mode and since = min_dwell (free to switch at once);
 * in_prefill[i] for each of the n_active sequences taking part in the
 * step. */
typedef struct cleave_psm_gate {
    cleave_split_mode mode; /* the context's mode now */
    uint32_t since;         /* steps since the last switch */
    uint32_t min_dwell;     /* steps a mode is kept at least */
} cleave_psm_gate;
cleave_split_mode cleave_psm_gate_step(cleave_psm_gate *g, const bool *in_prefill, size_t n_active,
                                       cleave_split_mode prefill_mode, cleave_split_mode generate_mode);
/* The device(s) the context runs on, e.g. "cpu", "cuda:0 (NVIDIA H200)" or
 * "cpu:0+cpu:1 (layer)". */
const char *cleave_context_device(const cleave_context *ctx);
/* CUDA devices this build and machine can use: 0 in a build without CUDA
 * or where the driver finds none. */
int cleave_gpu_count(void);

/* Memory of one device of a context: what the plan set aside and what its
 * allocator has seen (peak included). */
typedef struct cleave_device_memory {
    char name[128];
    size_t planned_weights, planned_kv, planned_compute; /* device memory */
    /* of planned_compute, the tensor split's all-reduce buffers (made once
     * per context); the rest is what the placement allocated for its
     * activation scratch and the cell table's copy: compute */
    size_t planned_collective, compute;
    /* a tiered KV cache: its host part (bytes), and the cells of each layer
     * in device memory on this device (n_ctx when untiered or holding no
     * KV; rounded down to the device's granularity) with the staging's
     * bytes, which planned_kv includes */
    size_t planned_kv_host, kv_staging;
    uint32_t kv_vram_cells;
    size_t used, peak, budget; /* this context's allocations; budget 0 = none */
    size_t device_used;        /* GPUs: bytes in use on the whole device (cudaMemGetInfo), else 0 */
    /* a tensor split: this device's kv heads [lo, hi) and FFN rows [lo, hi),
     * and the units the shares were rounded to (whole quant blocks of o and
     * down: head_unit kv heads, ff_unit rows); all 0 under other modes */
    uint32_t kv_heads[2], ff_rows[2], head_unit, ff_unit;
    uint32_t n_threads; /* a CPU device's worker threads (the caller's included); 0 on GPUs */
} cleave_device_memory;
size_t cleave_context_n_devices(const cleave_context *ctx);
cleave_status cleave_context_memory(const cleave_context *ctx, size_t device,
                                    cleave_device_memory *out);

/* Progress of long work on this context from now on: cleave_decode calls
 * it after each batch of a multi-batch prompt (fraction done). NULL: off. */
void cleave_context_set_progress(cleave_context *ctx, cleave_progress_fn fn, void *user);

/* Runs n tokens of sequence seq at positions pos0, pos0+1, ... through the
 * model in batches of at most n_batch. Logits of the last token are kept
 * (all tokens' logits when all_logits is true). A prompt that would overflow
 * the context returns CLEAVE_ERR_CONTEXT_FULL and changes nothing. */
cleave_status cleave_decode(cleave_context *ctx, const int32_t *tokens, size_t n, int32_t pos0,
                            int32_t seq, bool all_logits);
/* A batch of tokens from several sequences in one pass (batched decoding):
 * token i goes to position pos[i] of sequence seq[i]. The logits of each
 * sequence's last token in the batch (its highest position) are kept,
 * readable with cleave_get_logits(ctx, i) for that token's index i. Batches
 * over n_batch run in several passes. Fails with CLEAVE_ERR_CONTEXT_FULL,
 * changing nothing, when the cache cannot take them. */
cleave_status cleave_decode_batch(cleave_context *ctx, const int32_t *tokens, const int32_t *pos,
                                  const int32_t *seq, size_t n);
/* cleave_decode_batch, then each sequence's next token drawn where the
 * logits are: for each token i that is its sequence's last in the batch
 * and has a sampler (samplers[i] != NULL; the others' entries are not
 * read), sampled[i] is the token its sampler drew on the device (already
 * recorded in the sampler, so only token ids crossed to the host and
 * cleave_get_logits(ctx, i) is NULL), or CLEAVE_TOKEN_SAMPLE_ON_HOST:
 * the caller samples that row from cleave_get_logits as after
 * cleave_decode_batch (a tensor split, a batch of more than one pass, a
 * device without the op, or a row the device hands back). Every other
 * sampled[i] is -1. The draws are the ones cleave_sampler_sample makes
 * from the same samplers. */
#define CLEAVE_TOKEN_SAMPLE_ON_HOST (-2)
cleave_status cleave_decode_batch_sample(cleave_context *ctx, const int32_t *tokens, const int32_t *pos,
                                         const int32_t *seq, size_t n, cleave_sampler *const *samplers,
                                         int32_t *sampled);
/* Logits (n_vocab floats) of the i-th token of the last decode call; i = -1 is
 * the last token. NULL if that row was not kept. */
const float *cleave_get_logits(cleave_context *ctx, int32_t i);
/* Forgets every cached token of every sequence. */
void cleave_kv_clear(cleave_context *ctx);
/* Number of positions cached for seq (its next position). */
int32_t cleave_kv_seq_len(const cleave_context *ctx, int32_t seq);
/* Forgets seq's cached positions [p0, p1) (p1 < 0: p0 onwards), as
 * llama.cpp's seq_rm does; the rest of the cache is untouched. */
cleave_status cleave_kv_seq_rm(cleave_context *ctx, int32_t seq, int32_t p0, int32_t p1);

/* ---- chat templates ------------------------------------------------------ */

/* A conversation as the prompt text of a model family: "llama3", "chatml"
 * (Qwen and others), "mistral", "llama2", "qwen3" (chatml; the model thinks
 * first), "qwen3-nothink" (an empty think block after the assistant's
 * start) or "gpt-oss" (harmony). cleave_chat_template_of names
 * the family of the model's tokenizer.chat_template by its markers, or
 * fails (UNSUPPORTED, saying so) when the model has none or another.
 * cleave_chat_apply writes the text (n_out: its length; too little room
 * is INVALID_ARG with n_out the size needed); add_assistant opens the
 * assistant's turn. Roles: "system", "user", "assistant". The text holds
 * the family's control tokens: tokenize it with parse_special. */
typedef struct cleave_chat_message {
    const char *role, *content;
} cleave_chat_message;
cleave_status cleave_chat_template_of(const cleave_model *model, const char **name);
cleave_status cleave_chat_apply(const char *name, const cleave_chat_message *msgs, size_t n_msgs,
                                bool add_assistant, char *buf, size_t cap, size_t *n_out);

/* A chat template ready to render: the model's own Jinja, a Jinja text of
 * the caller's, or a built-in family. name NULL: the model's
 * tokenizer.chat_template (Jinja), parsed once; when the model has none,
 * the built-in "chatml" (as llama.cpp falls back); when its Jinja fails
 * to parse, the built-in family its markers name, if any, else the parse
 * error (line and column). name a family ("llama3", "chatml", ...): that
 * built-in. jinja_text non-NULL (e.g. a --chat-template-file): that Jinja
 * instead (name must then be NULL). model may be NULL with jinja_text or
 * name (bos_token and eos_token then ""). The Jinja runs sandboxed (no
 * files) and bounded (8 MiB of output, 10 million steps, nesting 64). */
typedef struct cleave_chat_template cleave_chat_template;
cleave_status cleave_chat_template_load(const cleave_model *model, const char *name, const char *jinja_text,
                                        cleave_chat_template **out);
void cleave_chat_template_free(cleave_chat_template *t);
/* A line for logs and /props, e.g. "the model's template (Jinja, 1234
 * bytes)", "chatml (built in; the model has none)", "mistral (built in;
 * the model's template did not parse: line 3, column 5: ...)". */
const char *cleave_chat_template_describe(const cleave_chat_template *t);
/* The Jinja source, or NULL for a built-in family. */
const char *cleave_chat_template_source(const cleave_chat_template *t);
/* Renders a conversation with the variables Hugging Face transformers
 * gives a template (messages, add_generation_prompt, bos_token,
 * eos_token, raise_exception, strftime_now); add_generation_prompt opens
 * the assistant's turn. Same buffer contract as cleave_chat_apply (too
 * small: INVALID_ARG with *n_out the bytes needed). The template's
 * raise_exception, or a limit hit, is INVALID_ARG with its message.
 * Reentrant: one template may render on several threads at once. */
cleave_status cleave_chat_template_apply(const cleave_chat_template *t, const cleave_chat_message *msgs,
                                         size_t n_msgs, bool add_generation_prompt, char *buf, size_t cap,
                                         size_t *n_out);
/* A rendered chat's tokens: control tokens parsed, BOS as `bos` says, but
 * not a second one in front of the BOS a template writes itself ({{
 * bos_token }}, as many do), unless `bos` is ALWAYS. Same contract as
 * cleave_tokenize. */
cleave_status cleave_tokenize_chat(const cleave_model *model, const char *text, size_t len, cleave_bos bos,
                                   int32_t *tokens, size_t cap, size_t *n_out);

/* ---- sequence state ------------------------------------------------------ */

/* A sequence's cached tokens as a blob that does not depend on where they
 * were cached: the cells' positions, every layer's K and V by cell and kv
 * head, the logits of the last token, and optionally the caller's token
 * ids; versioned, with the model's fingerprint and a checksum (format in
 * README.md). Saved under one placement (split mode, devices, tiering),
 * it restores under any other of the same model; into another KV type
 * where no precision is lost (any type into f32), else only with
 * allow_lossy. Restoring replaces the sequence's cells; a blob that is
 * corrupt, truncated, of another model or version, or that does not fit,
 * is refused with the context untouched.
 * size: the bytes get writes (n_tokens: 0, or one id per cached cell). */
typedef struct cleave_state_options {
    bool allow_lossy; /* restore into a KV type that loses precision (e.g. q8_0 into f16) */
} cleave_state_options;
cleave_status cleave_state_seq_size(cleave_context *ctx, int32_t seq, size_t n_tokens, size_t *out);
cleave_status cleave_state_seq_get(cleave_context *ctx, int32_t seq, const int32_t *tokens, size_t n_tokens,
                                   void *buf, size_t cap, size_t *written);
cleave_status cleave_state_seq_set(cleave_context *ctx, int32_t seq, const void *buf, size_t n,
                                   const cleave_state_options *opt);
cleave_status cleave_state_seq_save_file(cleave_context *ctx, int32_t seq, const int32_t *tokens,
                                         size_t n_tokens, const char *path);
cleave_status cleave_state_seq_load_file(cleave_context *ctx, int32_t seq, const char *path,
                                         const cleave_state_options *opt);
/* The token ids a blob holds (n_tokens 0 when it holds none), after the
 * same checks as a restore against ctx's model; nothing is restored. */
cleave_status cleave_state_tokens(cleave_context *ctx, const void *buf, size_t n, int32_t *tokens, size_t cap,
                                  size_t *n_tokens);

/* ---- sampling ----------------------------------------------------------- */

typedef struct cleave_sampler_params {
    float temperature;      /* <= 0 means greedy */
    int32_t top_k;          /* <= 0: off */
    float top_p;            /* >= 1: off */
    float min_p;            /* <= 0: off */
    float repeat_penalty;   /* 1: off */
    float frequency_penalty;/* 0: off */
    float presence_penalty; /* 0: off */
    int32_t penalty_last_n; /* tokens looked back for penalties; 0: off, -1: whole history */
    uint64_t seed;
} cleave_sampler_params;

cleave_sampler_params cleave_sampler_default_params(void);
cleave_status cleave_sampler_new(const cleave_sampler_params *params, uint32_t n_vocab,
                                 cleave_sampler **out);
void cleave_sampler_free(cleave_sampler *s);
/* Picks the next token from logits (not modified) and records it in the
 * history the penalties look at. */
cleave_status cleave_sampler_sample(cleave_sampler *s, const float *logits, int32_t *token);
/* Records a token (e.g. from the prompt) in the penalty history. */
void cleave_sampler_accept(cleave_sampler *s, int32_t token);
void cleave_sampler_reset(cleave_sampler *s);

/* ---- tools: conversion and inspection ----------------------------------- */

/* Imports a llama2.c checkpoint + tokenizer into a GGUF file. */
cleave_status cleave_convert_llama2c(const char *model_bin, const char *tokenizer_bin,
                                     const char *out_gguf);
/* out_type for cleave_convert_hf: keep each weight's checkpoint dtype. */
#define CLEAVE_CONVERT_KEEP_TYPE ((cleave_type)-1)
/* Imports a Hugging Face transformers checkpoint directory (config.json and
 * model.safetensors, or shards listed in model.safetensors.index.json) of a
 * LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM or Qwen3ForCausalLM
 * into a GGUF. out_type is the type of the 2-D weights: F32, F16, BF16 or
 * CLEAVE_CONVERT_KEEP_TYPE; norms and biases are always F32. The vocabulary
 * written is a synthetic SentencePiece one of config.vocab_size tokens (HF
 * tokenizers are BPE, which cleave does not run yet): token ids and logits
 * are the model's, text is not. Builds without cJSON return
 * CLEAVE_ERR_UNSUPPORTED. progress may be NULL. */
cleave_status cleave_convert_hf(const char *dir, cleave_type out_type, const char *out_gguf,
                                cleave_progress_fn progress, void *progress_user);
/* Prints architecture, hyperparameters, tensor table and memory needs. */
cleave_status cleave_print_info(const char *path, uint32_t n_ctx, void *file /* FILE* */);

/* Writes a GGUF with random weights of a preset's shapes. preset: "tiny",
 * "1b", "8b", "32b", "70b"; arch: "llama", "qwen2", "qwen3" (tiny only;
 * NULL = the preset's own); type: weights type (for a mixture such as
 * Q4_K_M, cleave_generate_model_mix). */
cleave_status cleave_generate_model(const char *preset, const char *arch, cleave_type type,
                                    uint64_t seed, const char *out_gguf,
                                    cleave_progress_fn progress, void *progress_user);
/* As cleave_generate_model, with the weights' types chosen per tensor as
 * cleave_quantize_model would for the file type `mix` (any name it
 * accepts, or a plain type name such as "f16" or "q4_K": every matrix in
 * that type). */
cleave_status cleave_generate_model_mix(const char *preset, const char *arch, const char *mix,
                                        uint64_t seed, const char *out_gguf,
                                        cleave_progress_fn progress, void *progress_user);
/* The same file's header, tensors and layout with the weights left as a
 * hole of zeros: the file has its full length but takes no disk blocks
 * where the file system keeps sparse files. For planning (cleave info:
 * where a model of these shapes would fit) with shapes larger than the
 * disk; it runs, with zero weights. */
cleave_status cleave_generate_model_shapes(const char *preset, const char *arch, const char *mix,
                                           const char *out_gguf);

/* ---- tools: quantization ----------------------------------------------- */

typedef struct cleave_quantize_params {
    /* A llama.cpp file type: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K_S,
     * Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, IQ4_NL,
     * IQ4_XS, F16, BF16, F32 (any case; Q3_K, Q4_K, Q5_K mean the _M
     * mixtures, as in llama-quantize). Each tensor gets llama.cpp's type
     * for it: e.g. Q4_K_M puts output.weight and some attn_v/ffn_down
     * layers in Q6_K, the other matrices in Q4_K; norms are copied. */
    const char *type;
    bool pure;       /* every quantized tensor in the base type (llama-quantize --pure) */
    int n_threads;   /* 0: every core */
    cleave_progress_fn progress; /* may be NULL; fraction of weights done */
    void *progress_user;
    /* Per-tensor notes (a fallback type, requantizing q8_0); may be NULL. */
    void (*note)(const char *line, void *user);
    void *note_user;
} cleave_quantize_params;

typedef struct cleave_quantize_stats {
    uint64_t n_tensors, n_converted, n_fallback, n_weights;
    uint64_t bytes_in, bytes_out; /* tensor data, before and after */
} cleave_quantize_stats;

cleave_quantize_params cleave_quantize_default_params(void);
/* Writes in_gguf's model with its weights quantized to out_gguf (a temp
 * file renamed at the end: nothing is left behind on failure). Inputs are
 * f32, f16 or bf16 (q8_0 is requantized, which loses precision; other
 * quantized inputs are refused unless a tensor keeps its type). Metadata
 * is copied; general.file_type and general.quantization_version are set.
 * stats may be NULL. */
cleave_status cleave_quantize_model(const char *in_gguf, const char *out_gguf,
                                    const cleave_quantize_params *params,
                                    cleave_quantize_stats *stats);
/* "Q8_0, Q4_0, ..." the names cleave_quantize_model and cleave_generate_model accept. */
const char *cleave_quantize_type_names(void);

#ifdef __cplusplus
}
#endif
#endif
