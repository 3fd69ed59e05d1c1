/* ui: the agent's topology page (GET /ui): one self-contained HTML document that reads the API in the browser. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>

#define UI_CONTENT_TYPE "text/html; charset=utf-8"
/* The page's policy, sent as a header (the page's <meta> copy cannot say frame-ancestors): inline script and style
 * only, no other origin, API calls to this origin, never inside a frame. */
#define UI_CSP "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; " \
               "img-src data:; form-action 'none'; base-uri 'none'; frame-ancestors 'none'"

/* The headers to serve the page with (name, value pairs, NULL-terminated): the policy, no framing, no sniffing. */
extern const char *const ui_headers[];

/* The page: inline CSS and JS, no external assets, no data and no secret. It asks for the API token once
 * (kept in the tab's sessionStorage, sent only as "Authorization: Bearer", never in a URL) and fetches
 * /v1/topology, /v1/capacity, /v1/vms, /v1/reservations and /v1/vms/{vmid} every few seconds. It draws
 * packages > NUMA nodes (memory bars) > L3 groups > cores > threads; each thread cell carries data-cpu,
 * and data-vmid when a VM holds it. A static string: serve it as is, with UI_CONTENT_TYPE. */
const char *ui_page(void);

/* Whether an Accept header value asks for HTML before JSON (a browser opening /v1/topology): text/html is
 * listed and application/json is not listed before it. NULL or empty: false. Pure. */
bool ui_wants_html(const char *accept);
