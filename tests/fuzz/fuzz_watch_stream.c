/* fuzz_watch_stream: the coordinator's informer (list, then watch: the line framing of the chunked stream, each
 * event's JSON, BOOKMARK and ERROR events, resource versions) against a loopback server that answers the list with
 * the input's part before its first NUL (when it has one; else an empty PodList; every page, so a list with a
 * continue token is a list whose pages never end) and the watch with the rest. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <jansson.h>

#include "fuzz.h"
#include "fuzz_stub.h"
#include "kube.h"

static const char empty_list[] = "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"1\"},"
                                 "\"items\":[]}";

static struct kube_client *client(void) {
        static struct kube_client *c;
        if (!c) {
                struct kube_config cfg = { .server = (char *)fuzz_stub_start(), .token = (char *)"fuzz" };
                struct kube_client_options o = { .timeout_ms = 2000, .max_retries = KUBE_NO_RETRY,
                                                 .backoff_base_ms = 1, .backoff_max_ms = 1 };
                if (kube_client_new(&cfg, &o, &c) < 0)
                        abort();
        }
        return c;
}

static int on_event(enum kube_watch_event ev, const json_t *obj, void *userdata) {
        size_t *n = userdata;
        (*n)++;
        if (ev != KUBE_EVENT_SYNCED && !json_is_object(obj))
                abort(); /* every object event carries an object */
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        fuzz_quiet();
        struct kube_client *c = client();
        const uint8_t *nul = memchr(data, 0, size);
        fuzz_stub_clear();
        if (nul)
                fuzz_stub_answer(NULL, 200, data, (size_t)(nul - data));
        else
                fuzz_stub_answer(NULL, 200, empty_list, sizeof empty_list - 1);
        const uint8_t *watch = nul ? nul + 1 : data;
        fuzz_stub_answer("watch=", 200, watch, size - (size_t)(watch - data));
        struct kube_informer_options o = { .watch_timeout_s = 1, .idle_timeout_ms = 1000, .backoff_base_ms = 1,
                                           .backoff_max_ms = 1, .page_size = 2 };
        size_t events = 0;
        struct kube_informer *inf = NULL;
        if (kube_informer_new(c, &kube_pods, NULL, &o, on_event, &events, &inf) < 0)
                abort();
        for (int i = 0; i < 3; i++) /* the list, a watch, and what follows the watch's end */
                if (kube_informer_step(inf) < 0)
                        break;
        kube_informer_free(inf);
        return 0;
}
