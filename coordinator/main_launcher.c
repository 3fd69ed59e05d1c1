/* main_launcher: the launcher's entry points (coordinator/launch/launcher.c) as the controller's function table. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "main_launcher.h"

#include "launcher.h"

const struct controller_launcher_ops *main_launcher_ops(void) {
        static const struct controller_launcher_ops ops = {
                .create = launcher_new,
                .destroy = launcher_free,
                .reconcile = launcher_reconcile,
                .collect_garbage = launcher_collect_garbage,
                .wrote = launcher_wrote,
                .backoff_active = launcher_backoff_active,
        };
        return &ops;
}
