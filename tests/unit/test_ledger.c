/* Tests for agent/ledger's state file: the previous generation, the fallback to it, unreadable state, leftover
 * temporary files, and a save that cannot build an entry (placement_to_json is wrapped: -Wl,--wrap). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "ledger.h"
#include "testutil.h"

static bool fail_placement_json;

json_t *__real_placement_to_json(const struct placement *p);
json_t *__wrap_placement_to_json(const struct placement *p);
json_t *__wrap_placement_to_json(const struct placement *p) {
        return fail_placement_json ? NULL : __real_placement_to_json(p);
}

struct fixture {
        char dir[64], path[128];
};

static int setup(void **state) {
        struct fixture *f = calloc(1, sizeof *f);
        snprintf(f->dir, sizeof f->dir, "/tmp/pvescale-ledger-XXXXXX");
        if (!mkdtemp(f->dir))
                return -1;
        snprintf(f->path, sizeof f->path, "%s/%s", f->dir, LEDGER_STATE_FILE);
        fail_placement_json = false;
        *state = f;
        return 0;
}

static int teardown(void **state) {
        struct fixture *f = *state;
        test_rmtree(f->dir);
        free(f);
        return 0;
}

/* A ledger of n count-only reservations (the simple policy: no topology needed). */
static struct ledger *ledger_of(unsigned n) {
        struct ledger *l = ledger_new();
        struct capacity free = { .cpus_free = 1000, .memory_free_bytes = 1ull << 40 };
        for (unsigned i = 0; i < n; i++) {
                struct reservation_request rq = { .shape = { 1, 1u << 30, 0 }, .ttl_seconds = 600 };
                struct reservation *r;
                char reason[128];
                snprintf(rq.owner, sizeof rq.owner, "claim-%u", i);
                assert_int_equal(ledger_reserve(l, NULL, &free, &rq, false, 1000, &r, reason, sizeof reason), 0);
        }
        return l;
}

static size_t loaded(struct fixture *f, int want) {
        struct ledger *l = NULL;
        char problem[512] = "";
        int r = ledger_load(f->dir, NULL, 2000, &l, problem, sizeof problem);
        if (r != want)
                fail_msg("ledger_load: %d, want %d (%s)", r, want, problem);
        size_t n = l ? l->n : 0;
        ledger_free(l);
        return n;
}

static void damage(const char *path) {
        FILE *fp = fopen(path, "r+");
        assert_non_null(fp);
        fseek(fp, 5, SEEK_SET);
        fputc('#', fp);
        fclose(fp);
}

static bool exists(const char *path) {
        return access(path, F_OK) == 0;
}

static void test_save_fails_when_an_entry_cannot_be_built(void **state) {
        struct fixture *f = *state;
        struct ledger *l = ledger_of(2);
        assert_int_equal(ledger_save(l, f->dir), 0);
        struct placement *fake = (struct placement *)&fail_placement_json; /* never read: the wrap refuses */
        l->items[1]->placement = fake;
        fail_placement_json = true;
        assert_int_equal(ledger_save(l, f->dir), -ENOMEM);
        l->items[1]->placement = NULL;
        fail_placement_json = false;
        assert_int_equal(loaded(f, 0), 2); /* the file still has both */
        ledger_free(l);
}

static void test_damaged_current_falls_back_to_previous(void **state) {
        struct fixture *f = *state;
        char prev[160];
        snprintf(prev, sizeof prev, "%s%s", f->path, LEDGER_PREV_SUFFIX);
        struct ledger *one = ledger_of(1), *three = ledger_of(3);
        assert_int_equal(ledger_save(one, f->dir), 0);
        assert_false(exists(prev)); /* nothing to keep yet */
        assert_int_equal(ledger_save(three, f->dir), 0);
        assert_true(exists(prev));
        damage(f->path);
        /* A damaged current file never replaces the good previous generation. */
        assert_int_equal(ledger_save(three, f->dir), 0);
        damage(f->path);
        assert_int_equal(loaded(f, 1), 1);
        assert_false(exists(f->path)); /* set aside as .corrupt-<time> */
        char aside[192];
        snprintf(aside, sizeof aside, "%s.corrupt-2000", f->path);
        assert_true(exists(aside));
        ledger_free(one);
        ledger_free(three);
}

static void test_no_intact_generation_loads_nothing(void **state) {
        struct fixture *f = *state;
        struct ledger *l = ledger_of(1);
        assert_int_equal(ledger_save(l, f->dir), 0);
        damage(f->path);
        assert_int_equal(loaded(f, -EBADMSG), 0);
        assert_true(exists(f->path)); /* kept for the operator: a restart must not find "no file" and start empty */
        ledger_free(l);
}

static void test_unreadable_state_loads_nothing(void **state) {
        struct fixture *f = *state;
        assert_int_equal(mkdir(f->path, 0700), 0); /* read() fails: EISDIR, as EACCES, EIO or EMFILE would */
        struct ledger *l = NULL;
        char problem[512] = "";
        assert_int_equal(ledger_load(f->dir, NULL, 2000, &l, problem, sizeof problem), -EISDIR);
        assert_null(l);
        assert_non_null(strstr(problem, "cannot read"));
        assert_true(exists(f->path));
}

static void test_no_file_is_an_empty_ledger(void **state) {
        struct fixture *f = *state;
        assert_int_equal(loaded(f, 0), 0);
}

static void test_leftover_temporaries_are_removed(void **state) {
        struct fixture *f = *state;
        static const char *const left[] = { ".tmp.Ab12Cd", ".tmp.zzzzzz", ".prev.tmp" };
        char path[192], other[192];
        for (size_t i = 0; i < 3; i++) {
                snprintf(path, sizeof path, "%s%s", f->path, left[i]);
                fclose(fopen(path, "w"));
        }
        snprintf(other, sizeof other, "%s/other.json.tmp.123456", f->dir);
        fclose(fopen(other, "w"));
        assert_int_equal(loaded(f, 0), 0);
        for (size_t i = 0; i < 3; i++) {
                snprintf(path, sizeof path, "%s%s", f->path, left[i]);
                if (exists(path))
                        fail_msg("%s was not removed", path);
        }
        assert_true(exists(other));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_save_fails_when_an_entry_cannot_be_built, setup, teardown),
                cmocka_unit_test_setup_teardown(test_damaged_current_falls_back_to_previous, setup, teardown),
                cmocka_unit_test_setup_teardown(test_no_intact_generation_loads_nothing, setup, teardown),
                cmocka_unit_test_setup_teardown(test_unreadable_state_loads_nothing, setup, teardown),
                cmocka_unit_test_setup_teardown(test_no_file_is_an_empty_ledger, setup, teardown),
                cmocka_unit_test_setup_teardown(test_leftover_temporaries_are_removed, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
