/* A model's GGUF files as one: a single file, or every shard of a model
 * split as llama-gguf-split writes it (NAME-00001-of-00003.gguf, ...), with
 * the shards' tensor tables merged. Metadata is read from the first shard;
 * each tensor's data points into the mapping of the shard that holds it. */
#ifndef CLEAVE_GGUF_SHARDS_H
#define CLEAVE_GGUF_SHARDS_H

#include <stddef.h>

#include "cleave.h"
#include "gguf.h"

typedef struct gguf_shards gguf_shards;

/* Opens path; when its split.count is above 1, opens its siblings too
 * (path may name any shard) and checks that each is there, says the same
 * split.count and its own split.no, that no tensor is in two shards and
 * that the first shard's split.tensors.count matches. */
cleave_status gguf_shards_open(const char *path, gguf_shards **out);
void gguf_shards_close(gguf_shards *s);

/* 1 for an unsplit file. Shard 0 carries the metadata. */
size_t gguf_shards_count(const gguf_shards *s);
const gguf_file *gguf_shards_file(const gguf_shards *s, size_t i);
/* Bytes of all files together. */
size_t gguf_shards_size(const gguf_shards *s);

/* The merged tensor table, shard by shard in file order. */
size_t gguf_shards_n_tensors(const gguf_shards *s);
const gguf_tensor *gguf_shards_tensor_at(const gguf_shards *s, size_t i);
const gguf_tensor *gguf_shards_find_tensor(const gguf_shards *s,
                                           const char *name); /* NULL if absent */

#endif
