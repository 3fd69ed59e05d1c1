/* Tests for agent/ledger's undo of a change whose save failed, and its state file: the previous generation, the fallback to it, unreadable state, leftover
 * temporary files, a save that cannot build an entry (placement_to_json is wrapped: -Wl,--wrap), a save killed
 * with SIGKILL after each of its file-system calls (those are wrapped too), and a save the file-size limit stops. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

/* A child process saving the ledger kills itself (SIGKILL: no clean-up runs) after kill_after file-system calls
 * that change or sync the state directory. no_exchange makes renameat2 answer EINVAL, as on a file system
 * without RENAME_EXCHANGE. */
static unsigned kill_after, fs_calls; /* pwrite64 and ftruncate64: the names _FILE_OFFSET_BITS=64 calls */
static bool no_exchange;

static void fs_call_done(void) {
        if (kill_after && ++fs_calls == kill_after)
                raise(SIGKILL);
}

#define WRAP_FS_CALL(ret, name, params, args)         \
        ret __real_##name params;                       \
        ret __wrap_##name params;                       \
        ret __wrap_##name params {                      \
                ret r = __real_##name args;             \
                fs_call_done();                         \
                return r;                               \
        }
WRAP_FS_CALL(ssize_t, write, (int fd, const void *buf, size_t n), (fd, buf, n))
WRAP_FS_CALL(ssize_t, pwrite64, (int fd, const void *buf, size_t n, off_t off), (fd, buf, n, off))
WRAP_FS_CALL(int, fsync, (int fd), (fd))
WRAP_FS_CALL(int, fdatasync, (int fd), (fd))
WRAP_FS_CALL(int, ftruncate64, (int fd, off_t len), (fd, len))
WRAP_FS_CALL(int, link, (const char *from, const char *to), (from, to))
WRAP_FS_CALL(int, rename, (const char *from, const char *to), (from, to))
WRAP_FS_CALL(int, unlink, (const char *path), (path))

int __real_renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned flags);
int __wrap_renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned flags);
int __wrap_renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned flags) {
        if (no_exchange && (flags & RENAME_EXCHANGE)) {
                errno = EINVAL;
                return -1;
        }
        int r = __real_renameat2(fromfd, from, tofd, to, flags);
        fs_call_done();
        return r;
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

/* Empty dir, then save ledgers of 1, 1, 1 and 2 reservations: the current generation has 2, .prev has 1, and
 * the spare of the rotation exists (as it does from the third save on). */
static void two_generations(struct fixture *f) {
        test_rmtree(f->dir);
        assert_int_equal(mkdir(f->dir, 0700), 0);
        for (unsigned i = 0; i < 4; i++) {
                struct ledger *l = ledger_of(i < 3 ? 1 : 2);
                assert_int_equal(ledger_save(l, f->dir), 0);
                ledger_free(l);
        }
}

static ino_t inode_of(const char *path) {
        struct stat st;
        return stat(path, &st) == 0 ? st.st_ino : 0;
}

/* Copy the regular files of dir into a new directory copy (new inodes, the same bytes). */
static void copy_dir(const char *dir, char *copy, size_t len) {
        snprintf(copy, len, "/tmp/pvescale-ledger-copy-XXXXXX");
        assert_non_null(mkdtemp(copy));
        DIR *d = opendir(dir);
        assert_non_null(d);
        for (struct dirent *e; (e = readdir(d));) {
                char from[PATH_MAX], to[PATH_MAX], buf[65536];
                snprintf(from, sizeof from, "%s/%s", dir, e->d_name);
                snprintf(to, sizeof to, "%s/%s", copy, e->d_name);
                FILE *in = e->d_name[0] != '.' ? fopen(from, "r") : NULL;
                if (!in)
                        continue;
                FILE *out = fopen(to, "w");
                assert_non_null(out);
                size_t n = fread(buf, 1, sizeof buf, in);
                assert_int_equal(fwrite(buf, 1, n, out), n);
                fclose(in);
                fclose(out);
        }
        closedir(d);
}

/* What a crash can leave: two distinct generations (or one, and no shared inode); the acknowledged generation
 * (2 reservations) or the one being saved (3) loads; with the current file damaged, an older one loads. */
static void check_crash_state(struct fixture *f, unsigned step) {
        char prev[160], spare[160], copy[64];
        snprintf(prev, sizeof prev, "%s%s", f->path, LEDGER_PREV_SUFFIX);
        snprintf(spare, sizeof spare, "%s%s", f->path, LEDGER_SPARE_SUFFIX);
        ino_t cur_ino = inode_of(f->path), prev_ino = inode_of(prev), spare_ino = inode_of(spare);
        if (cur_ino && cur_ino == prev_ino)
                fail_msg("killed after call %u: %s and its .prev are one file (inode %lu)", step, f->path,
                         (unsigned long)cur_ino);
        if (spare_ino && (spare_ino == cur_ino || spare_ino == prev_ino))
                fail_msg("killed after call %u: the spare is also a generation (inode %lu)", step,
                         (unsigned long)spare_ino);
        copy_dir(f->dir, copy, sizeof copy);
        struct ledger *l = NULL;
        char problem[512] = "";
        int r = ledger_load(copy, NULL, 2000, &l, problem, sizeof problem);
        if (r < 0 || l->n < 2)
                fail_msg("killed after call %u: load %d with %zu reservations (%s)", step, r, l ? l->n : 0, problem);
        ledger_free(l);
        test_rmtree(copy);
        if (cur_ino)
                damage(f->path);
        l = NULL;
        r = ledger_load(f->dir, NULL, 2000, &l, problem, sizeof problem);
        if (r != 1 || l->n < 1)
                fail_msg("killed after call %u, current damaged: load %d (%s)", step, r, problem);
        ledger_free(l);
}

/* Save a third generation in a child killed after 1, 2, ... file-system calls, until one save completes. */
static void kill_at_every_step(struct fixture *f) {
        struct ledger *three = ledger_of(3);
        bool completed = false;
        unsigned step;
        for (step = 1; !completed && step < 64; step++) {
                two_generations(f);
                pid_t pid = fork();
                assert_true(pid >= 0);
                if (pid == 0) {
                        kill_after = step;
                        _exit(ledger_save(three, f->dir) == 0 ? 0 : 1);
                }
                int status;
                assert_int_equal(waitpid(pid, &status, 0), pid);
                completed = WIFEXITED(status);
                if (completed)
                        assert_int_equal(WEXITSTATUS(status), 0);
                else
                        assert_int_equal(WTERMSIG(status), SIGKILL);
                check_crash_state(f, step);
        }
        assert_true(completed);
        assert_in_range(step, 5, 63); /* it was killed after writing, syncing and renaming */
        ledger_free(three);
}

static void test_kill_9_at_every_step_of_a_save(void **state) {
        kill_at_every_step(*state);
}

static void test_kill_9_at_every_step_without_rename_exchange(void **state) {
        no_exchange = true;
        kill_at_every_step(*state);
        no_exchange = false;
}

/* Only the state files, none of a save's temporaries. */
static void assert_no_temporaries(const char *dir) {
        DIR *d = opendir(dir);
        assert_non_null(d);
        for (struct dirent *e; (e = readdir(d));) {
                bool known = e->d_name[0] == '.' || strcmp(e->d_name, LEDGER_STATE_FILE) == 0 ||
                             strcmp(e->d_name, LEDGER_STATE_FILE LEDGER_PREV_SUFFIX) == 0;
                if (!known)
                        fail_msg("%s/%s was left behind", dir, e->d_name);
        }
        closedir(d);
}

/* A write the disk refuses (the file-size limit: EFBIG, as a full disk gives ENOSPC) fails the save, leaves no
 * temporary file, and keeps the two generations apart. */
static void test_failed_write_leaves_two_generations_and_no_temporaries(void **state) {
        struct fixture *f = *state;
        char prev[160];
        snprintf(prev, sizeof prev, "%s%s", f->path, LEDGER_PREV_SUFFIX);
        two_generations(f);
        struct ledger *many = ledger_of(40);
        struct rlimit saved, small;
        assert_int_equal(getrlimit(RLIMIT_FSIZE, &saved), 0);
        small = saved;
        small.rlim_cur = 1024;
        void (*old)(int) = signal(SIGXFSZ, SIG_IGN);
        assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
        int r = ledger_save(many, f->dir);
        assert_int_equal(setrlimit(RLIMIT_FSIZE, &saved), 0);
        signal(SIGXFSZ, old);
        assert_int_equal(r, -EFBIG);
        assert_no_temporaries(f->dir);
        assert_int_not_equal(inode_of(f->path), inode_of(prev));
        assert_int_equal(loaded(f, 0), 2);
        damage(f->path);
        assert_int_equal(loaded(f, 1), 1);
        ledger_free(many);
}

/* A bind taken back gives the reservation its vmid and expiry again; a grant taken back removes it; a reservation
 * gone meanwhile is left alone. */
static void test_undo_takes_a_change_back(void **state) {
        (void)state;
        struct ledger *l = ledger_of(2);
        struct reservation *r = l->items[0];
        int64_t expiry = r->expires_at;
        struct ledger_undo bind = ledger_undo_bind(r);
        assert_int_equal(ledger_bind(l, r->id, 105), 0);
        assert_int_equal(r->vmid, 105);
        assert_int_equal(r->expires_at, 0);
        ledger_undo(l, &bind);
        assert_int_equal(r->vmid, 0);
        assert_int_equal(r->expires_at, expiry);
        assert_null(ledger_find_vmid(l, 105));

        struct ledger_undo grant = ledger_undo_reserve(l->items[1]);
        char id[LEDGER_ID_LEN + 1];
        snprintf(id, sizeof id, "%s", l->items[1]->id);
        ledger_undo(l, &grant);
        assert_int_equal(l->n, 1);
        assert_null(ledger_find(l, id));
        assert_non_null(ledger_find(l, bind.id));
        ledger_undo(l, &grant); /* gone already */
        assert_int_equal(l->n, 1);

        assert_int_equal(ledger_release(l, bind.id), 0);
        ledger_undo(l, &bind); /* the reservation is gone: nothing to give back */
        assert_int_equal(l->n, 0);
        ledger_free(l);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_undo_takes_a_change_back),
                cmocka_unit_test_setup_teardown(test_save_fails_when_an_entry_cannot_be_built, setup, teardown),
                cmocka_unit_test_setup_teardown(test_damaged_current_falls_back_to_previous, setup, teardown),
                cmocka_unit_test_setup_teardown(test_no_intact_generation_loads_nothing, setup, teardown),
                cmocka_unit_test_setup_teardown(test_unreadable_state_loads_nothing, setup, teardown),
                cmocka_unit_test_setup_teardown(test_no_file_is_an_empty_ledger, setup, teardown),
                cmocka_unit_test_setup_teardown(test_leftover_temporaries_are_removed, setup, teardown),
                cmocka_unit_test_setup_teardown(test_kill_9_at_every_step_of_a_save, setup, teardown),
                cmocka_unit_test_setup_teardown(test_kill_9_at_every_step_without_rename_exchange, setup, teardown),
                cmocka_unit_test_setup_teardown(test_failed_write_leaves_two_generations_and_no_temporaries, setup,
                                                teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
