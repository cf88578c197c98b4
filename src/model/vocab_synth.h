/* A synthetic SentencePiece vocabulary of any size, for GGUF files whose
 * real tokenizer cleave does not have or run: random models (gen.c) and
 * Hugging Face imports, whose BPE tokenizers are not supported yet. Token
 * ids are all that such models are driven with, so the pieces only need to
 * be distinct and loadable. */
#ifndef CLEAVE_VOCAB_SYNTH_H
#define CLEAVE_VOCAB_SYNTH_H

#include <stdint.h>

#include "cleave.h"
#include "gguf.h"

/* Writes tokenizer.ggml.* (model "llama"): <unk>, <s>, </s>, the 256 byte
 * tokens, then letter pieces, n_vocab in all (at least 3, so the BOS/EOS ids
 * 1 and 2 exist). */
cleave_status vocab_synth_write(gguf_writer *w, uint32_t n_vocab);

#endif
