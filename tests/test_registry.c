/*
 * tests/test_registry.c: the option tables and the registries that make a
 * new policy, quirk or importer one file and one line: the shared option
 * parser stores typed values and rejects bad ones naming the flag; policy
 * options reach the policy that declares them; quirks belong to their
 * policy; the registries are consistent (a planted clash is caught); and
 * `kvreplay replay --help` / `import --help` list what the registries hold.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "import.h"
#include "importer.h"
#include "options.h"
#include "policy.h"
#include "status.h"

// ----------------------------------------------------------------------------
// The shared option parser

typedef struct demo_opts {
    const char *name;
    int32_t     n;
    int64_t     bytes;
    double      x;
    bool        flag;
    hx_int_list list;
    hx_str_list many;
} demo_opts;

#define OPT(field) offsetof(demo_opts, field)
static const hx_option k_demo[] = {
    {"--name", "-N", "S", "a string", HX_OPT_STRING, OPT(name), 0, 0, NULL},
    {"--n", NULL, "N", "an int", HX_OPT_INT, OPT(n), 1, 10, NULL},
    {"--mib", NULL, "MIB", "a size", HX_OPT_MIB, OPT(bytes), 0, 1024, NULL},
    {"--x", NULL, "X", "a real", HX_OPT_DOUBLE, OPT(x), 0, 1, NULL},
    {"--flag", NULL, NULL, "a flag", HX_OPT_FLAG, OPT(flag), 0, 0, NULL},
    {"--list", NULL, "L", "a list", HX_OPT_LIST, OPT(list), 1, 100, NULL},
    {"--many", NULL, "M", "repeatable", HX_OPT_STRINGS, OPT(many), 0, 0, NULL},
    {0},
};

static int parse_all(int argc, char **argv, demo_opts *o) {
    for (int i = 1; i < argc; i++)
        if (!hx_options_parse(k_demo, o, argc, argv, &i)) return i;
    return 0;
}

static void an_option_table_stores_typed_values(void **state) {
    (void)state;
    char *argv[] = {"cmd", "-N", "abc", "--n=7", "--mib", "3", "--x", "0.5", "--flag", "--list", "4,5,6",
                    "--many", "a", "--many=b"};
    demo_opts o = {0};
    assert_int_equal(parse_all(14, argv, &o), 0);
    assert_string_equal(o.name, "abc");
    assert_int_equal(o.n, 7);
    assert_int_equal(o.bytes, (int64_t)3 << 20);
    assert_true(o.x == 0.5);
    assert_true(o.flag);
    assert_int_equal(o.list.n, 3);
    assert_int_equal(o.list.v[2], 6);
    assert_int_equal(o.many.n, 2);
    assert_string_equal(o.many.v[1], "b");
    /* an option of no table, and a longer name sharing a prefix, are not taken */
    char *other[] = {"cmd", "--nope", "--names", "x"};
    assert_int_equal(parse_all(4, other, &o), 1);
    int i = 2;
    assert_false(hx_options_parse(k_demo, &o, 4, other, &i));
}

/* Runs fn in a child with stderr captured; returns its exit code. */
static int in_child(void (*fn)(void *), void *arg, char *err, size_t cap) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        fn(arg);
        _exit(0);
    }
    close(fds[1]);
    size_t got = 0;
    for (ssize_t n; (n = read(fds[0], err + got, cap - 1 - got)) > 0;) got += (size_t)n;  /* until EOF */
    err[got] = '\0';
    close(fds[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

static void parse_demo(void *arg) {
    char **argv = arg;  /* NULL-terminated */
    int argc = 0;
    while (argv[argc]) argc++;
    demo_opts o = {0};
    parse_all(argc, argv, &o);
}

static void a_bad_value_exits_2_naming_the_flag(void **state) {
    (void)state;
    char err[512];
    char *out_of_range[] = {"cmd", "--n", "11", NULL};
    assert_int_equal(in_child(parse_demo, out_of_range, err, sizeof err), 2);
    assert_non_null(strstr(err, "--n: expected an integer in [1, 10], got '11'"));
    char *not_a_list[] = {"cmd", "--list", "4,x", NULL};
    assert_int_equal(in_child(parse_demo, not_a_list, err, sizeof err), 2);
    assert_non_null(strstr(err, "--list:"));
    char *no_value[] = {"cmd", "--x", NULL};
    assert_int_equal(in_child(parse_demo, no_value, err, sizeof err), 2);
    assert_non_null(strstr(err, "--x: missing value"));
}

// ----------------------------------------------------------------------------
// Policy options and quirks

static void policy_options_are_kept_by_name_and_read_as_their_policy_parses_them(void **state) {
    (void)state;
    hx_policy_args args = {0};
    char *argv[] = {"replay", "--cache-ram", "2", "--anchor=auto", "--slots", "3", "--fresh-cache", "--db", "x"};
    int i = 1;
    for (; i < 7; i++) assert_true(hx_policy_args_take(&args, 9, argv, &i, NULL, 0));
    assert_int_equal(i, 7);
    assert_false(hx_policy_args_take(&args, 9, argv, &i, NULL, 0));  /* --db is not a policy option */
    assert_int_equal(args.n, 4);
    int64_t ram = 0;
    assert_true(hx_policy_args_read(&args, "--cache-ram", &ram));
    assert_int_equal(ram, (int64_t)2 << 20);  /* MiB on the command line, bytes in the field */
    int32_t anchor = 5;
    assert_true(hx_policy_args_read(&args, "--anchor", &anchor));
    assert_int_equal(anchor, -1);
    bool fresh = false;
    assert_true(hx_policy_args_read(&args, "--fresh-cache", &fresh));
    assert_true(fresh);
    int32_t every = 9;
    assert_false(hx_policy_args_read(&args, "--checkpoint-every", &every));
    assert_int_equal(every, 9);
    /* a later value replaces an earlier one; numbers set by a program are in the field's unit */
    assert_int_equal(hx_policy_args_set_num(&args, "--cache-ram", 12345), ENG_OK);
    assert_int_equal(args.n, 4);
    assert_true(hx_policy_args_read(&args, "--cache-ram", &ram));
    assert_int_equal(ram, 12345);
    assert_int_equal(hx_policy_args_set(&args, "--no-such-option", "1"), ENG_ERR_ARG);
}

static void parse_slots_zero(void *arg) {
    (void)arg;
    hx_policy_args args = {0};
    char *argv[] = {"replay", "--slots", "0"};
    int i = 1;
    char err[512];
    hx_took(hx_policy_args_take(&args, 3, argv, &i, err, sizeof err), err);  /* the library's error, cli's exit */
}

static void a_bad_policy_option_value_exits_2_at_parse_time(void **state) {
    (void)state;
    char err[512];
    assert_int_equal(in_child(parse_slots_zero, NULL, err, sizeof err), 2);
    assert_non_null(strstr(err, "--slots: expected an integer in [1, 64], got '0'"));
}

static void quirks_belong_to_their_policy(void **state) {
    (void)state;
    unsigned q = 0;
    char err[256];
    assert_int_equal(hx_quirks_parse("slot-lcp", "offgrid-checkpoint,full-reprocess", &q, err, sizeof err), ENG_OK);
    assert_int_equal(q, 1u << 0 | 1u << 2);
    assert_string_equal(hx_quirks_str("slot-lcp", q), "full-reprocess,offgrid-checkpoint");
    assert_int_equal(hx_quirks_parse("slot-lcp", "anchor-cold-only", &q, err, sizeof err), ENG_ERR_ARG);
    assert_non_null(strstr(err, "'anchor-cold-only' is a quirk of policy disk-anchor, not slot-lcp"));
    assert_int_equal(hx_quirks_parse("disk-anchor", "nope", &q, err, sizeof err), ENG_ERR_ARG);
    assert_non_null(strstr(err, "unknown quirk 'nope' (known: full-reprocess, swa-threshold, offgrid-checkpoint, "
                                "system-blind, anchor-cold-only, hybrid-block-size, prompt-key)"));
    assert_int_equal(hx_quirks_parse("radix", "hybrid-block-size", &q, err, sizeof err), ENG_ERR_ARG);
    assert_non_null(strstr(err, "'hybrid-block-size' is a quirk of policy block-hash, not radix"));
    assert_int_equal(hx_quirks_parse("disk-anchor", "anchor-cold-only", &q, err, sizeof err), ENG_OK);
    assert_string_equal(hx_quirks_str("disk-anchor", q), "anchor-cold-only");
}

// ----------------------------------------------------------------------------
// Registry consistency: every entry complete; an option name two policies
// declare must have one type (hx_policy_args keeps one value per name)

/* The first problem of a policy list, or NULL. */
static const char *policy_list_problem(const hx_policy_ops *const *list, char *buf, size_t cap) {
    for (size_t i = 0; list[i]; i++) {
        const hx_policy_ops *p = list[i];
        if (!p->name || !p->create || !p->acquire || !p->on_chunk || !p->release || !p->destroy)
            return snprintf(buf, cap, "policy %zu: incomplete ops", i), buf;
        if (p->opts_size && (!p->defaults || !p->options))
            return snprintf(buf, cap, "%s: options without defaults", p->name), buf;
        int nq = 0;
        for (const hx_quirk *q = p->quirks; q && q->name; q++, nq++)
            if (!q->help || !q->source) return snprintf(buf, cap, "%s: quirk %s without help or source", p->name, q->name), buf;
        if (nq > 32) return snprintf(buf, cap, "%s: more than 32 quirks", p->name), buf;
        for (const hx_option *o = p->options; o && o->name; o++) {
            if (strncmp(o->name, "--", 2) || !o->help)
                return snprintf(buf, cap, "%s: option %s needs a --name and help", p->name, o->name), buf;
            if (o->offset >= p->opts_size) return snprintf(buf, cap, "%s: %s lies outside its struct", p->name, o->name), buf;
            for (size_t j = 0; j < i; j++) {
                const hx_option *d = hx_option_find(list[j]->options, o->name);
                if (d && d->type != o->type)
                    return snprintf(buf, cap, "%s: %s declared with another type by %s", p->name, o->name,
                                    list[j]->name), buf;
            }
        }
    }
    return NULL;
}

static void the_policy_registry_is_consistent_and_a_planted_clash_is_caught(void **state) {
    (void)state;
    char buf[256];
    const char *problem = policy_list_problem(hx_policies, buf, sizeof buf);
    if (problem) fail_msg("%s", problem);
    /* plant: a policy declaring --cache-ram as a plain integer next to slot-lcp's MiB option */
    static const hx_option clash_opts[] = {
        {"--cache-ram", NULL, "N", "clash", HX_OPT_INT, 0, 0, 10, NULL},
        {0},
    };
    static const int32_t clash_defaults = 0;
    hx_policy_ops clash = *hx_policies[0];
    clash.name = "clash";
    clash.options = clash_opts;
    clash.defaults = &clash_defaults;
    clash.opts_size = sizeof clash_defaults;
    const hx_policy_ops *planted[8];
    size_t n = 0;
    for (; hx_policies[n]; n++) planted[n] = hx_policies[n];
    planted[n++] = &clash;
    planted[n] = NULL;
    problem = policy_list_problem(planted, buf, sizeof buf);
    assert_non_null(problem);
    assert_non_null(strstr(problem, "--cache-ram declared with another type by slot-lcp"));
}

static void importers_are_found_by_name_in_registry_order(void **state) {
    (void)state;
    int n = 0;
    for (; hx_importers[n]; n++) {
        const hx_importer *imp = hx_importers[n];
        assert_non_null(imp->name);
        assert_non_null(imp->help);
        assert_non_null(imp->import);
        assert_true(!imp->opts_size || (imp->defaults && imp->options));
        assert_int_equal(hx_import_format_from_name(imp->name), n);
        assert_string_equal(hx_import_format_name((hx_import_format)n), imp->name);
        assert_ptr_equal(hx_importer_at(n), imp);
    }
    assert_true(n >= 4);
    assert_null(hx_importer_at(n));
    assert_string_equal(hx_import_format_name((hx_import_format)n), "?");
}

// ----------------------------------------------------------------------------
// --help lists what the registries hold

static char *capture(const char *cmd) {
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t cap = 1 << 16;
    char *out = malloc(cap);
    assert_non_null(out);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    assert_int_equal(pclose(f), 0);
    return out;
}

static void help_lists_every_registered_policy_option_quirk_and_importer(void **state) {
    (void)state;
    const char *b = getenv("BUILD");
    char cmd[256];
    snprintf(cmd, sizeof cmd, "%s/kvreplay replay --help", b ? b : "build");
    char *help = capture(cmd);
    for (size_t i = 0; hx_policies[i]; i++) {
        assert_non_null(strstr(help, hx_policies[i]->name));
        for (const hx_option *o = hx_policies[i]->options; o && o->name; o++) {
            char line[128];
            snprintf(line, sizeof line, "  %s ", o->name);
            if (!strstr(help, line)) fail_msg("replay --help lacks %s", o->name);
        }
        for (const hx_quirk *q = hx_policies[i]->quirks; q && q->name; q++)
            if (!strstr(help, q->name)) fail_msg("replay --help lacks quirk %s", q->name);
    }
    free(help);
    snprintf(cmd, sizeof cmd, "%s/kvreplay import --help", b ? b : "build");
    help = capture(cmd);
    for (size_t i = 0; hx_importers[i]; i++) {
        assert_non_null(strstr(help, hx_importers[i]->name));
        assert_non_null(strstr(help, hx_importers[i]->help));
    }
    free(help);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(an_option_table_stores_typed_values),
        cmocka_unit_test(a_bad_value_exits_2_naming_the_flag),
        cmocka_unit_test(policy_options_are_kept_by_name_and_read_as_their_policy_parses_them),
        cmocka_unit_test(a_bad_policy_option_value_exits_2_at_parse_time),
        cmocka_unit_test(quirks_belong_to_their_policy),
        cmocka_unit_test(the_policy_registry_is_consistent_and_a_planted_clash_is_caught),
        cmocka_unit_test(importers_are_found_by_name_in_registry_order),
        cmocka_unit_test(help_lists_every_registered_policy_option_quirk_and_importer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
