/* topology_common: what the topology readers share: a file under a root parsed into a value, and node lookups. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "topology.h"
#include "topology_internal.h"

#include <stdlib.h>

#include "fileio.h"

int topology__read_under(const char *root, const char *path, topology__parse_fn parse, void *out) {
        char *text;
        int r = fileio_read_under(root, path, &text);
        if (r < 0)
                return r;
        r = parse(text, out);
        free(text);
        return r;
}

int topology_numa_index(const struct topology *t, int id) {
        for (size_t i = 0; i < t->n_numa_nodes; i++)
                if (t->numa_nodes[i].id == id)
                        return (int)i;
        return -1;
}
