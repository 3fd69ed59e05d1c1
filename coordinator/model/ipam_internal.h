/* ipam_internal: what the files of the ipam module share. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include "ipam.h"

int ipam__cmp(const struct ipam_addr *a, const struct ipam_addr *b);
void ipam__step(struct ipam_addr *a, int delta);
bool ipam__in_range(const struct ipam_range *r, const struct ipam_addr *a);
