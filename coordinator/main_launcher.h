/* main_launcher: the launcher's entry points as the controller's function table (NULL when not built in). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include "controller.h"

/* The table for controller_new, or NULL when this build has no launcher (then only --launch=false works). */
const struct controller_launcher_ops *main_launcher_ops(void);
