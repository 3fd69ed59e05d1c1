/* cleanup: scope-bound release of the common types (systemd's _cleanup_ idiom) and the explicit hand-over. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* A variable declared _cleanup_(f) has f(&variable) called when it goes out of scope, on every way out of its
 * block: return, break, goto (GCC's and Clang's cleanup attribute). f takes a pointer to the variable and must
 * accept the "nothing held" value, so initialise every such variable where it is declared (NULL, or -1 for an
 * fd). Variables are released in the reverse order of their declarations.
 *
 *      _cleanup_free_ char *path = NULL;
 *      _cleanup_fclose_ FILE *f = NULL;
 *      _cleanup_close_ int fd = -1;
 *      _cleanup_(json_decrefp) json_t *doc = NULL;   (jansson's own json_decrefp)
 *
 * To keep what a variable holds past the scope (return it to the caller, store it in a struct), hand it over
 * with TAKE_PTR / TAKE_FD: the cleanup then finds NULL / -1 and does nothing. */
#define _cleanup_(f) __attribute__((cleanup(f)))
#define _cleanup_free_ _cleanup_(cleanup_freep)
#define _cleanup_fclose_ _cleanup_(cleanup_fclosep)
#define _cleanup_close_ _cleanup_(cleanup_closep)

/* Evaluate to p's value and leave NULL in p (the variable is read once). */
#define TAKE_PTR(p)                                      \
        ({                                               \
                __typeof__(p) *cleanup_pp_ = &(p);       \
                __typeof__(p) cleanup_v_ = *cleanup_pp_; \
                *cleanup_pp_ = NULL;                     \
                cleanup_v_;                              \
        })

/* Evaluate to fd's value and leave -1 in fd. */
#define TAKE_FD(fd)                             \
        ({                                      \
                int *cleanup_pfd_ = &(fd);      \
                int cleanup_v_ = *cleanup_pfd_; \
                *cleanup_pfd_ = -1;             \
                cleanup_v_;                     \
        })

/* The release functions behind the macros; p points to the variable. errno is kept, so that a cleanup
 * running after a failed call does not change what the caller reads. */
static inline void cleanup_freep(void *p) {
        free(*(void **)p);
}

static inline void cleanup_fclosep(FILE **f) {
        int saved = errno;
        if (*f)
                fclose(*f);
        errno = saved;
}

static inline void cleanup_closep(int *fd) {
        int saved = errno;
        if (*fd >= 0)
                close(*fd);
        errno = saved;
}
