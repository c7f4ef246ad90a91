/* tap.h - a tiny TAP producer for the C unit tests in tests/unit/.
 *
 *   TAP_OK(cond, "title %d", x);   one test point
 *   return tap_done();             plan, 'N passed, N failed', exit status
 */
#ifndef KV_TAP_H
#define KV_TAP_H
#include <stdio.h>
#include <stdarg.h>

static int tap_n, tap_pass, tap_fail;

static void tap_ok(int cond, const char *fmt, ...)
{
    va_list ap;
    char title[2048];
    if (tap_n == 0)
        setvbuf(stdout, NULL, _IOLBF, 0);   /* progress shows, even in a log */
    tap_n++;
    if (cond)
        tap_pass++;
    else
        tap_fail++;
    printf("%sok %d - ", cond ? "" : "not ", tap_n);
    va_start(ap, fmt);
    vsnprintf(title, sizeof title, fmt, ap);
    va_end(ap);
    for (const char *c = title; *c; c++) {  /* one line: a newline as \n */
        if (*c == '\n')
            fputs("\\n", stdout);
        else
            putchar(*c);
    }
    putchar('\n');
}
#define TAP_OK(cond, ...) tap_ok(!!(cond), __VA_ARGS__)

static int tap_done(void)
{
    printf("1..%d\n%d passed, %d failed\n", tap_n, tap_pass, tap_fail);
    return tap_fail != 0;
}
#endif
