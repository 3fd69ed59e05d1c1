/* place_cmd: the `pvescale-agent place` dry run: JSON requests in, placements out, cumulatively. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdio.h>

#include "capacity.h"
#include "topology.h"

/* Read one JSON request per line from in ({"vcpus": N, "memory_bytes": B, "hugepage_kib": K?}) and
 * write one compact JSON line per request to out, in order: {"ok": true, "cpus", "vcpu_map", "numa"}
 * when placed (the placement is then charged to free, so later lines see it), {"ok": false,
 * "reason": "..."} when refused or when the line is bad (the reason names the field; the run goes on).
 * Blank lines are skipped. Nothing is persisted. Returns the number of bad input lines (>= 0), or a
 * negative errno on a read/write error or ENOMEM. */
int place_command_run(const struct topology *t, struct capacity *free, FILE *in, FILE *out);
