/* Opening a path for reading. A FIFO opened for reading waits for a writer
 * forever, and a device or directory is no file either, so every reader of
 * a user-given path (models, importers' inputs, states, rates, prompts)
 * opens it without blocking and refuses anything but a regular file. */
#ifndef CLEAVE_FILE_H
#define CLEAVE_FILE_H

#include <stdio.h>

#include "cleave.h"

/* A descriptor of the regular file at path, opened read-only (close it);
 * otherwise an I/O error naming the path and what it is, with *fd -1. */
cleave_status file_open_read(const char *path, int *fd);
/* The same as a stdio stream (fclose it). */
cleave_status file_fopen_read(const char *path, FILE **f);

#endif
