/* daemon: the agent's event loop (HTTPS API, inotify on the PVE dirs, signals, timers, QMP answers, sd_notify). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include "agent.h"

/* Serve until SIGTERM/SIGINT. The agent must be loaded (agent_load_all) and have its token.
 * Returns 0 on a clean stop or a negative errno (logged). */
int daemon_run(struct agent *a);
