/* repeat: when to log a failure that repeats (a pin that keeps failing, a host that stays unreachable): when it
 * starts, when its cause changes and when it ends, not on every attempt. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>

struct repeat {
        int cause;       /* the last failure's cause (a negative errno, or any code the caller chooses); 0: none */
        unsigned failed; /* attempts failed in a row */
};

enum repeat_event {
        REPEAT_OK,        /* a success after successes: nothing to say beyond the usual */
        REPEAT_STARTED,   /* the first failure after a success (or ever): log it */
        REPEAT_CHANGED,   /* still failing, for another cause: log it */
        REPEAT_SAME,      /* still failing for the same cause: keep quiet (debug at most) */
        REPEAT_ENDED,     /* a success after failures: log that it works again (with r->failed before the reset) */
};

/* Note one attempt: cause 0 is a success, anything else a failure with that cause. *ret_failed (may be NULL)
 * gets the failures in a row counting this one, or, on REPEAT_ENDED, those that just ended. */
enum repeat_event repeat_note(struct repeat *r, int cause, unsigned *ret_failed);
