/*
 * test_srvlist.c - common/srvlist: parsing ddpd's address list (--server, $DDP_SERVER), with
 * an error naming the bad element, and the redirect rule that decides which targets may be
 * followed and which of them see the Authorization header.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/srvlist.h"

/* Parses text, which must be refused with a message holding want. */
static void refused(const char *text, const char *want)
{
    struct srvlist l;
    struct ddp_err err;
    err_clear(&err);
    int rc = srvlist_parse(text, &l, &err);
    if (rc != DDP_EINVAL || !strstr(err.msg, want))
        fail_msg("'%s': rc %d, message '%s', wanted one holding '%s'", text, rc, err.msg, want);
    assert_int_equal(l.n, 0);
    assert_null(l.urls);
}

static void test_srvlist_parse_list(void **state)
{
    (void)state;
    struct srvlist l;
    struct ddp_err err;
    assert_int_equal(srvlist_parse(" http://10.0.0.1:8470/ ,HTTPS://Coord.example:9443,"
                                   "http://[::1]:8470,http://node-2",
                                   &l, &err),
                     0);
    assert_int_equal(l.n, 4);
    assert_string_equal(l.urls[0], "http://10.0.0.1:8470");
    assert_string_equal(l.urls[1], "HTTPS://Coord.example:9443");
    assert_int_equal(l.origins[1].https, 1);
    assert_string_equal(l.origins[1].host, "coord.example");
    assert_int_equal(l.origins[1].port, 9443);
    assert_string_equal(l.origins[2].host, "::1");
    assert_int_equal(l.origins[3].port, 80);
    assert_int_equal(srvlist_find(&l, "http://10.0.0.1:8470/v1/jobs?x=1"), 0);
    assert_int_equal(srvlist_find(&l, "https://coord.EXAMPLE:9443"), 1);
    assert_int_equal(srvlist_find(&l, "http://node-2:80/"), 3);
    assert_int_equal(srvlist_find(&l, "http://10.0.0.1:8471"), -1);
    assert_int_equal(srvlist_find(&l, "https://10.0.0.1:8470"), -1);
    srvlist_release(&l);
    srvlist_release(&l); /* released twice, and NULL: both fine */
    srvlist_release(NULL);

    assert_int_equal(srvlist_parse("http://127.0.0.1:8470", &l, &err), 0);
    assert_int_equal(l.n, 1);
    srvlist_release(&l);
}

static void test_srvlist_parse_refuses(void **state)
{
    (void)state;
    refused("", "empty list");
    refused("   ", "empty list");
    refused("http://a:1,,http://b:2", "element 2 is empty");
    refused("http://a:1,", "element 2 is empty");
    refused(",http://a:1", "element 1 is empty");
    refused("http://a:1, ,http://b:2", "element 2 is empty");
    refused("http://a:1,ftp://b:2", "element 2 'ftp://b:2': scheme must be http or https");
    refused("a:1", "element 1 'a:1': scheme must be http or https");
    refused("http://:8470", "element 1 'http://:8470': no host");
    refused("http://a:1,http://b:0", "element 2 'http://b:0': port must be a number 1..65535");
    refused("http://b:65536", "port must be a number");
    refused("http://b:", "port must be a number");
    refused("http://b:12x", "element 1 'http://b:12x'");
    refused("http://b:1/v1", "no path");
    refused("http://user@b:1", "element 1 'http://user@b:1'");
    refused("http://[::1:1", "brackets");
    char many[64 * (SRVLIST_MAX + 2)] = "";
    for (int i = 0; i <= SRVLIST_MAX; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "%shttp://h%d:1", i ? "," : "",
                 i);
    refused(many, "more than 16 addresses");
}

static void test_srvlist_redirect_rule(void **state)
{
    (void)state;
    struct srvlist l;
    struct ddp_err err;
    int auth = -1;
    assert_int_equal(srvlist_parse("http://a:1,http://b:2,https://s:3", &l, &err), 0);

    /* To a listed address: followed, with Authorization. */
    assert_int_equal(
        srvlist_redirect_check(&l, "http://a:1/v1/jobs", "http://B:2/v1/jobs", 0, &auth, &err), 0);
    assert_int_equal(auth, 1);
    /* To an unlisted one: followed, without. */
    assert_int_equal(
        srvlist_redirect_check(&l, "http://a:1/v1/jobs", "http://c:9/v1/jobs", 0, &auth, &err), 0);
    assert_int_equal(auth, 0);
    /* The same host on another port is another origin. */
    assert_int_equal(srvlist_redirect_check(&l, "http://a:1/x", "http://a:2/x", 0, &auth, &err), 0);
    assert_int_equal(auth, 0);
    /* The leader a listed address names in its not_leader answer: with. */
    assert_int_equal(srvlist_redirect_check(&l, "http://a:1/x", "http://c:9/x", 1, &auth, &err), 0);
    assert_int_equal(auth, 1);
    /* ... but not one that an unlisted redirect target names. */
    assert_int_equal(srvlist_redirect_check(&l, "http://c:9/x", "http://d:9/x", 1, &auth, &err), 0);
    assert_int_equal(auth, 0);
    /* http up to https is fine; https down to http, or another scheme, is refused. */
    assert_int_equal(srvlist_redirect_check(&l, "http://a:1/x", "https://s:3/x", 0, &auth, &err),
                     0);
    assert_int_equal(auth, 1);
    auth = -1;
    assert_int_equal(srvlist_redirect_check(&l, "https://s:3/x", "http://a:1/x", 0, &auth, &err),
                     DDP_EINVAL);
    assert_non_null(strstr(err.msg, "from https down to http"));
    assert_int_equal(auth, -1);
    assert_int_equal(srvlist_redirect_check(&l, "http://a:1/x", "ftp://a:1/x", 0, &auth, &err),
                     DDP_EINVAL);
    assert_non_null(strstr(err.msg, "redirect to 'ftp://a:1/x' refused"));
    assert_int_equal(srvlist_redirect_check(&l, "http://a:1/x", "/v1/jobs", 0, &auth, &err),
                     DDP_EINVAL);
    assert_int_equal(
        srvlist_redirect_check(&l, "http://a:1/x", "file:///etc/passwd", 0, &auth, &err),
        DDP_EINVAL);
    assert_int_equal(
        srvlist_redirect_check(&l, "http://a:1/x", "http://a:1@evil:2/x", 0, &auth, &err),
        DDP_EINVAL);
    assert_int_equal(auth, -1);
    srvlist_release(&l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_srvlist_parse_list),
        cmocka_unit_test(test_srvlist_parse_refuses),
        cmocka_unit_test(test_srvlist_redirect_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
