/* repeat: when to log a failure that repeats. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "repeat.h"

#include <stddef.h>

enum repeat_event repeat_note(struct repeat *r, int cause, unsigned *ret_failed) {
        enum repeat_event ev;
        if (cause == 0) {
                ev = r->failed > 0 ? REPEAT_ENDED : REPEAT_OK;
                if (ret_failed)
                        *ret_failed = r->failed;
                *r = (struct repeat){ 0 };
                return ev;
        }
        ev = r->cause != cause ? REPEAT_CHANGED : REPEAT_SAME;
        if (r->failed == 0)
                ev = REPEAT_STARTED;
        r->cause = cause;
        r->failed++;
        if (ret_failed)
                *ret_failed = r->failed;
        return ev;
}
