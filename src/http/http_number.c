/*
 * http_number.c - a float as a JSON number: what snprintf "%.9g" of its double writes
 * (9 significant digits, so that it reads back as the same float), without printf.
 *
 * v2 infer answers every output element inline as such a number: 1000 of them for an
 * ImageNet classifier. glibc's printf takes about a quarter of a microsecond for each
 * (vfprintf's set-up, then a multi-precision expansion of the exact value), and on the
 * tiny-model benchmark (bench/http.sh) formatting the answer's 4 numbers was about a
 * tenth of the HTTP threads' time.
 *
 * DESIGN
 * A finite float is m * 2^e with m < 2^24. Its exact decimal value is an integer N
 * times 10^-k: N = m << e, k = 0 when e >= 0 (N < 2^128 for every float), and
 * N = m * 5^-e, k = -e when e < 0, which fits in 128 bits while -e <= 44 (5^44 < 2^104),
 * i.e. for |x| >= 2^-21 ~ 4.8e-7 (and for smaller values whose m is short enough).
 * From N the 9 significant digits are rounded exactly, ties to even, as glibc's printf
 * does in the default rounding mode; then printed by %g's rules: scientific notation
 * when the decimal exponent X is below -4 or at least 9 (d.dddde+XX, two exponent
 * digits at least), fixed otherwise; trailing zeros and a trailing point dropped. Every
 * other value (smaller magnitudes, which need more than 128 bits) goes to snprintf:
 * the result is the same, only slower. Zero prints "0" or "-0". test_http compares this
 * with snprintf over millions of floats spread over every exponent and on the rounding
 * edges (ties, 9.99999999e+n carrying into 1e+(n+1), the fixed/scientific switch).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "http/http_internal.h"

typedef unsigned __int128 u128;

enum { FLOAT_DIGITS = 9, MAX_POW5 = 44 };

/* 10^n, n <= 38. */
static u128 pow10_u128(int n) {
  u128 p = 1;
  while (n-- > 0) p *= 10;
  return p;
}

/* Decimal digits of n > 0. */
static int digit_count(u128 n) {
  int d = 1;
  for (u128 p = 10; d < 39 && n >= p; p *= 10) d++;
  return d;
}

/* Writes `exp` as %g's exponent: sign and at least two digits. */
static size_t put_exponent(char *out, int exp) {
  size_t len = 0;
  out[len++] = 'e';
  out[len++] = exp < 0 ? '-' : '+';
  unsigned u = (unsigned)(exp < 0 ? -exp : exp);
  if (u >= 100) out[len++] = (char)('0' + u / 100);
  out[len++] = (char)('0' + u / 10 % 10);
  out[len++] = (char)('0' + u % 10);
  return len;
}

size_t http__float_json(float x, char out[HTTP__FLOAT_CHARS]) {
  if (!isfinite(x)) {
    memcpy(out, "null", 5); /* JSON has no NaN or infinity */
    return 4;
  }
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  uint32_t biased = bits >> 23 & 0xff, m = bits & 0x7fffff;
  if (biased) m |= 1u << 23;
  int e = biased ? (int)biased - 150 : -149;
  size_t len = 0;
  if (bits >> 31) out[len++] = '-';
  if (m == 0) {
    out[len++] = '0';
    out[len] = '\0';
    return len;
  }
  while (e < 0 && !(m & 1)) { /* an even m: fewer powers of 5 to carry */
    m >>= 1;
    e++;
  }
  if (e < -MAX_POW5) return (size_t)snprintf(out, HTTP__FLOAT_CHARS, "%.9g", (double)x);

  u128 n = e >= 0 ? (u128)m << e : (u128)m;
  int k = 0;
  for (; e < 0; e++, k++) n *= 5;
  /* value = n * 10^-k; round n to FLOAT_DIGITS significant digits */
  int digits = digit_count(n);
  int point = digits - 1 - k; /* decimal exponent of the leading digit */
  uint64_t sig;
  if (digits > FLOAT_DIGITS) {
    u128 unit = pow10_u128(digits - FLOAT_DIGITS), rest = n % unit, half = unit / 2;
    sig = (uint64_t)(n / unit);
    if (rest > half || (rest == half && (sig & 1))) sig++;
    if (sig == 1000000000u) { /* 999999999.5 -> 1e9: one digit more */
      sig = 100000000u;
      point++;
    }
    digits = FLOAT_DIGITS;
  } else {
    sig = (uint64_t)n;
  }
  /* the significant digits, without trailing zeros */
  char d[FLOAT_DIGITS];
  for (int i = digits - 1; i >= 0; i--, sig /= 10) d[i] = (char)('0' + sig % 10);
  while (digits > 1 && d[digits - 1] == '0') digits--;

  if (point < -4 || point >= FLOAT_DIGITS) {
    out[len++] = d[0];
    if (digits > 1) {
      out[len++] = '.';
      memcpy(out + len, d + 1, (size_t)digits - 1);
      len += (size_t)digits - 1;
    }
    len += put_exponent(out + len, point);
  } else if (point >= 0) {
    for (int i = 0; i <= point; i++) out[len++] = i < digits ? d[i] : '0';
    if (digits > point + 1) {
      out[len++] = '.';
      memcpy(out + len, d + point + 1, (size_t)(digits - point - 1));
      len += (size_t)(digits - point - 1);
    }
  } else {
    out[len++] = '0';
    out[len++] = '.';
    for (int i = -1; i > point; i--) out[len++] = '0';
    memcpy(out + len, d, (size_t)digits);
    len += (size_t)digits;
  }
  out[len] = '\0';
  return len;
}
