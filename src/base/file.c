#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"

static const char *kind(mode_t m) {
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

cleave_status file_open_read(const char *path, int *fd) {
    *fd = -1;
    if (!path) return err_set(CLEAVE_ERR_INVALID_ARG, "no file given");
    /* O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer */
    int d = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (d < 0) return err_set(CLEAVE_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(d, &sb) != 0) {
        int e = errno;
        close(d);
        return err_set(CLEAVE_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(d);
        return err_set(CLEAVE_ERR_IO, "%s: %s, not a regular file: cleave reads files", path, kind(sb.st_mode));
    }
    int flags = fcntl(d, F_GETFL);
    if (flags >= 0) (void)fcntl(d, F_SETFL, flags & ~O_NONBLOCK); /* ordinary reads from here */
    *fd = d;
    return CLEAVE_OK;
}

cleave_status file_fopen_read(const char *path, FILE **f) {
    *f = NULL;
    int d;
    cleave_status st = file_open_read(path, &d);
    if (st) return st;
    if (!(*f = fdopen(d, "rb"))) {
        int e = errno;
        close(d);
        return err_set(CLEAVE_ERR_IO, "%s: cannot open: %s", path, strerror(e));
    }
    return CLEAVE_OK;
}
