/*
 * core_log.c - one-line log messages on stderr with a level filter. The level is a
 * process-wide setting made once at start (INFERD_LOG_LEVEL or the CLI).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "core/core.h"

static _Atomic int log_level = CORE_LOG_INFO;

void core_log_set_level(core_log_level level) { log_level = level; }

void core_log(core_log_level level, const char *fmt, ...) {
  static const char *const names[] = {"debug", "info", "warn", "error"};
  if ((int)level < log_level) return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  /* One message, one line: a control character from a name or a url (a newline that
   * would start a forged line, an escape sequence for a terminal; also the C1 controls
   * U+0080..U+009F in UTF-8, such as NEL and CSI) is written as '?' per byte. */
  for (unsigned char *c = (unsigned char *)line; *c; c++)
    if (*c < 0x20 || *c == 0x7f)
      *c = '?';
    else if (*c == 0xc2 && c[1] >= 0x80 && c[1] <= 0x9f)
      c[0] = c[1] = '?';
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s %s\n", tm.tm_year + 1900,
          tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
          names[level], line);
}
