/*
 * topo_xml.c - an hwloc XML export (lstopo --of xml), checked and rewritten before hwloc
 * reads it.
 *
 * DESIGN
 * hwloc's XML import trusts its input. hwloc 2.9 dereferences NULL when an object of a
 * version 2 export has no complete_cpuset (a NUMA node no complete_nodeset); a malformed
 * attribute stops its reader in the middle of an object, which then lacks what followed
 * (the same crash); its failure paths leak the objects read so far. So topo_new never
 * gives hwloc the text it was given: topo__xml_rewrite reads it here, strictly, and
 * writes a new document holding what inferd uses, in the form hwloc writes:
 *   - kept: Machine (the root, and only there), Package, Die, Group, the data and
 *     unified caches, Core, PU and NUMANode, each with its type, os_index, the four
 *     sets (cpuset, complete_cpuset, nodeset, complete_nodeset: all required), the
 *     root's allowed sets, NUMA nodes' local_memory; caches get the depth and cache type
 *     their type names (hwloc refuses a cache whose attributes disagree with its type);
 *   - unwrapped (the object goes, what it holds moves up to its parent): instruction
 *     caches and memory-side caches (MemCache);
 *   - dropped with all they hold: I/O objects (Bridge, PCIDev, OSDev), Misc, and every
 *     element other than object (info, page_type, distances2, memattr, cpukind,
 *     support, userdata). Every other attribute (gp_index, subtype, cache sizes...) too.
 * inferd uses none of what goes.
 *
 * The syntax taken is the one hwloc writes: prolog (<?...?>, <!...>, without '<') before
 * <topology version="2.N">; elements <name attr="value" ...>, <name .../>, </name>
 * (names of a-z, 0-9 and _, attribute names of a-z and _, no '<' or '>' in a value),
 * whitespace between them, and text only inside elements that are dropped; nothing
 * after </topology> but whitespace; no NUL byte. A set is comma-separated words of "0x"
 * and 1 to 8 hex digits, most significant first (a zero word between two others may be
 * empty, as hwloc writes it: "0x000000ff,,0x0"), of at most TOPO_MAX_CPU_NUMBER + 1
 * bits: no infinite set. A number is decimal digits. PUs and NUMA nodes need an
 * os_index, at most TOPO_MAX_CPU_NUMBER.
 *
 * The structure taken: one root Machine; normal objects inside normal objects only, in
 * the order Package, Die, caches (L5 to L1), Core, PU from the outside in (Groups
 * anywhere above cores); a normal object without normal objects inside is a PU; NUMA
 * nodes and memory caches inside normal objects other than PUs, or inside memory
 * caches; nothing inside a NUMA node; inside I/O and Misc objects, only I/O and Misc
 * objects. One NUMA node at least.
 *
 * The sets taken are those hwloc keeps (it trusts them, and otherwise removes objects,
 * reorders them, or gives up, saying so on stderr): a PU's cpuset is {its os_index},
 * one PU per CPU, and each normal object's cpuset is exactly the CPUs of the PUs inside
 * it, which its complete_cpuset holds too; a NUMA node's nodeset is {its os_index}, one
 * node per number, in the nodeset and complete_nodeset of each normal object around it;
 * normal objects in one object come in the order of the first CPU of their
 * complete_cpuset; the root's allowed sets allow some PU and some NUMA node. Limits:
 * TOPO_MAX_XML_BYTES of text, TOPO_MAX_XML_OBJECTS objects kept, TOPO_MAX_NUMA_NODES
 * NUMA nodes, elements XML_MAX_DEPTH deep (hwloc's reader recurses). The work is
 * linear in the text and in PUs times depth.
 *
 * topo_machine.c checks what hwloc built again (each CPU in one core, distinct NUMA
 * node numbers), for every kind of machine.
 *
 * Pure: any thread.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "topo/topo_internal.h"

enum { XML_MAX_DEPTH = 64, XML_MAX_SET_WORDS = (TOPO_MAX_CPU_NUMBER + 1) / 32 };

/* ---- object types ------------------------------------------------------------------- */

typedef enum { KIND_NORMAL, KIND_MEMORY, KIND_SPECIAL } type_kind;
typedef enum { FATE_KEEP, FATE_UNWRAP, FATE_DROP } type_fate;

enum { RANK_ANY = -1, RANK_CORE = 40, RANK_PU = 50 };

typedef struct xml_type {
  const char *name;
  type_kind kind;
  type_fate fate;
  int rank;        /* kept normal types, from the outside in; RANK_ANY: anywhere outside cores */
  int cache_depth; /* kept caches: their level */
  bool numbered;   /* needs an os_index up to TOPO_MAX_CPU_NUMBER (PU, NUMANode) */
} xml_type;

static const xml_type MACHINE = {"Machine", KIND_NORMAL, FATE_KEEP, 0, 0, false};
static const xml_type TYPES[] = {
    {"Package", KIND_NORMAL, FATE_KEEP, 10, 0, false},  {"Die", KIND_NORMAL, FATE_KEEP, 20, 0, false},
    {"Group", KIND_NORMAL, FATE_KEEP, RANK_ANY, 0, false},
    {"L5Cache", KIND_NORMAL, FATE_KEEP, 30, 5, false},  {"L4Cache", KIND_NORMAL, FATE_KEEP, 31, 4, false},
    {"L3Cache", KIND_NORMAL, FATE_KEEP, 32, 3, false},  {"L2Cache", KIND_NORMAL, FATE_KEEP, 33, 2, false},
    {"L1Cache", KIND_NORMAL, FATE_KEEP, 34, 1, false},  {"L3iCache", KIND_NORMAL, FATE_UNWRAP, 0, 0, false},
    {"L2iCache", KIND_NORMAL, FATE_UNWRAP, 0, 0, false}, {"L1iCache", KIND_NORMAL, FATE_UNWRAP, 0, 0, false},
    {"Core", KIND_NORMAL, FATE_KEEP, RANK_CORE, 0, false}, {"PU", KIND_NORMAL, FATE_KEEP, RANK_PU, 0, true},
    {"NUMANode", KIND_MEMORY, FATE_KEEP, 0, 0, true},   {"MemCache", KIND_MEMORY, FATE_UNWRAP, 0, 0, false},
    {"Bridge", KIND_SPECIAL, FATE_DROP, 0, 0, false},   {"PCIDev", KIND_SPECIAL, FATE_DROP, 0, 0, false},
    {"OSDev", KIND_SPECIAL, FATE_DROP, 0, 0, false},    {"Misc", KIND_SPECIAL, FATE_DROP, 0, 0, false},
};

static const xml_type *find_type(const char *name, size_t size) {
  if (size == strlen(MACHINE.name) && !memcmp(name, MACHINE.name, size)) return &MACHINE;
  for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
    if (size == strlen(TYPES[i].name) && !memcmp(name, TYPES[i].name, size)) return &TYPES[i];
  return NULL;
}

/* ---- the reader ----------------------------------------------------------------------- */

typedef struct slice {
  const char *text; /* NULL: absent */
  size_t size;
} slice;

static bool slice_is(slice s, const char *word) { return s.text && s.size == strlen(word) && !memcmp(s.text, word, s.size); }

/* The attributes of an object that are kept. */
enum { ATTR_TYPE, ATTR_OS_INDEX, ATTR_CPUSET, ATTR_COMPLETE_CPUSET, ATTR_NODESET, ATTR_COMPLETE_NODESET,
       ATTR_ALLOWED_CPUSET, ATTR_ALLOWED_NODESET, ATTR_LOCAL_MEMORY, ATTR_COUNT };
static const char *const ATTR_NAMES[ATTR_COUNT] = {"type", "os_index", "cpuset", "complete_cpuset", "nodeset",
                                                   "complete_nodeset", "allowed_cpuset", "allowed_nodeset",
                                                   "local_memory"};

/* An open element. */
typedef struct element {
  slice name;
  size_t at;                 /* offset of its '<', for messages */
  bool dropped;              /* left out, with all it holds */
  const xml_type *type;      /* an object that is not dropped */
  const xml_type *outermost; /* the kept normal object of the highest rank around it, itself included */
  /* kept objects */
  hwloc_bitmap_t sets[4];    /* cpuset, complete_cpuset, nodeset, complete_nodeset */
  int pus;                   /* normal: the PUs inside it */
  bool holds_normal;         /* normal: a kept normal object is inside (through unwrapped ones) */
  long last_first;           /* normal: the first CPU of the complete_cpuset of the last normal
                                object kept inside (LONG_MAX: an empty one), -1 before any */
} element;

typedef struct reader {
  const char *text;
  size_t size, at;
  const char *source; /* for messages: "xml FILE" */
  element stack[XML_MAX_DEPTH];
  int depth;          /* stack[0] is <topology> */
  int objects, nodes; /* kept */
  bool have_root;
  hwloc_bitmap_t pus_seen, nodes_seen, allowed[2]; /* allowed: the root's allowed_cpuset, allowed_nodeset */
  char *out; /* the document written */
  size_t out_size, out_cap;
  bool out_of_memory;
  inferd_status *status;
} reader;

static int line_of(const reader *r, size_t at) {
  int line = 1;
  for (size_t i = 0; i < at && i < r->size; i++) line += r->text[i] == '\n';
  return line;
}

/* INVALID_ARG: "topology: xml FILE line N: what". */
static inferd_code bad(reader *r, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inferd_code bad(reader *r, size_t at, const char *fmt, ...) {
  char what[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return core_fail(r->status, INFERD_INVALID_ARG, "topology: %s line %d: %s", r->source, line_of(r, at), what);
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static void skip_space(reader *r) {
  while (r->at < r->size && is_space(r->text[r->at])) r->at++;
}
static bool at_text(const reader *r, const char *s) {
  size_t n = strlen(s);
  return r->size - r->at >= n && !memcmp(r->text + r->at, s, n);
}
/* How many characters from `from` on are among `chars` (the text has no NUL). */
static size_t span(const reader *r, size_t from, const char *chars) {
  size_t n = 0;
  while (from + n < r->size && strchr(chars, r->text[from + n])) n++;
  return n;
}

static const char NAME_CHARS[] = "abcdefghijklmnopqrstuvwxyz0123456789_";

/* ---- the document written ----------------------------------------------------------- */

static void out_add(reader *r, const char *s, size_t n) {
  if (r->out_of_memory) return;
  if (r->out_size + n + 1 > r->out_cap) {
    size_t cap = r->out_cap ? r->out_cap : 4096;
    while (cap < r->out_size + n + 1) cap *= 2;
    char *grown = realloc(r->out, cap);
    if (!grown) {
      r->out_of_memory = true;
      return;
    }
    r->out = grown;
    r->out_cap = cap;
  }
  memcpy(r->out + r->out_size, s, n);
  r->out_size += n;
  r->out[r->out_size] = '\0';
}
static void out_str(reader *r, const char *s) { out_add(r, s, strlen(s)); }
static void out_attr(reader *r, const char *name, slice value) {
  out_str(r, " ");
  out_str(r, name);
  out_str(r, "=\"");
  out_add(r, value.text, value.size);
  out_str(r, "\"");
}

/* ---- values --------------------------------------------------------------------------- */

/* Decimal digits of a value at most max (at least 9). */
static bool read_number(slice s, uint64_t max, uint64_t *value) {
  uint64_t v = 0;
  if (!s.size) return false;
  for (size_t i = 0; i < s.size; i++) {
    if (s.text[i] < '0' || s.text[i] > '9') return false;
    unsigned digit = (unsigned)(s.text[i] - '0');
    if (v > (max - digit) / 10) return false;
    v = v * 10 + digit;
  }
  *value = v;
  return true;
}

/* hwloc's set text, words of 32 bits most significant first: "0x000000ff,0x00000001";
 * hwloc writes a zero word between two others as nothing ("0x0000ffff,,0x0"). 1 to
 * XML_MAX_SET_WORDS words. */
static bool read_set(slice s) {
  size_t i = 0;
  for (int words = 1; words <= XML_MAX_SET_WORDS; words++) {
    if (words == 1 || i == s.size || s.text[i] != ',') { /* else an empty word, between two others */
      if (s.size - i < 3 || s.text[i] != '0' || s.text[i + 1] != 'x') return false;
      i += 2;
      size_t digits = 0;
      while (i < s.size && strchr("0123456789abcdefABCDEF", s.text[i])) i++, digits++;
      if (digits < 1 || digits > 8) return false;
    }
    if (i == s.size) return true;
    if (s.text[i++] != ',') return false;
  }
  return false;
}

/* ---- elements --------------------------------------------------------------------------- */

/* One attribute name="value" at r->at. */
static inferd_code read_attribute(reader *r, slice *name, slice *value) {
  size_t start = r->at, n = span(r, r->at, "abcdefghijklmnopqrstuvwxyz_");
  if (!n || r->size - r->at < n + 2 || r->text[r->at + n] != '=' || r->text[r->at + n + 1] != '"')
    return bad(r, start, "expected an attribute name=\"value\"");
  *name = (slice){r->text + r->at, n};
  r->at += n + 2;
  size_t from = r->at;
  while (r->at < r->size && r->text[r->at] != '"') {
    if (r->text[r->at] == '<' || r->text[r->at] == '>')
      return bad(r, start, "'%c' inside the value of %.*s", r->text[r->at], (int)CORE_MIN(n, 40), name->text);
    r->at++;
  }
  if (r->at >= r->size) return bad(r, start, "unterminated value of %.*s", (int)CORE_MIN(n, 40), name->text);
  *value = (slice){r->text + from, r->at - from};
  r->at++;
  return INFERD_OK;
}

/* The attributes of a tag, from r->at to its '>' or "/>" (*closed). Those named in
 * ATTR_NAMES land in attrs[] when it is not NULL; the others are read and skipped. */
static inferd_code read_attributes(reader *r, slice *attrs, bool *closed) {
  for (;;) {
    size_t before = r->at;
    skip_space(r);
    if (at_text(r, "/>") || at_text(r, ">")) {
      *closed = r->text[r->at] == '/';
      r->at += *closed ? 2 : 1;
      return INFERD_OK;
    }
    if (r->at >= r->size) return bad(r, before, "the document ends inside a tag");
    if (r->at == before) return bad(r, r->at, "expected a blank, '>' or '/>' in a tag");
    slice name, value;
    size_t start = r->at;
    inferd_code rc = read_attribute(r, &name, &value);
    if (rc != INFERD_OK) return rc;
    for (int a = 0; attrs && a < ATTR_COUNT; a++) {
      if (!slice_is(name, ATTR_NAMES[a])) continue;
      if (attrs[a].text) return bad(r, start, "attribute %s given twice", ATTR_NAMES[a]);
      attrs[a] = value;
    }
  }
}

/* The nearest kept object around stack[depth] (unwrapped ones are transparent), or NULL. */
static element *kept_holder(reader *r, int depth) {
  for (int i = depth - 1; i >= 1; i--)
    if (r->stack[i].type && r->stack[i].type->fate == FATE_KEEP) return &r->stack[i];
  return NULL;
}

static bool is_kept_normal(const element *e) { return e->type && e->type->fate == FATE_KEEP && e->type->kind == KIND_NORMAL; }

/* The sets of a kept object, parsed (their text was checked by read_set). */
static bool parse_sets(element *e, const slice *attrs) {
  for (int i = 0; i < 4; i++) {
    char text[64], *copy = attrs[ATTR_CPUSET + i].size < sizeof text ? text : malloc(attrs[ATTR_CPUSET + i].size + 1);
    e->sets[i] = hwloc_bitmap_alloc();
    if (!copy || !e->sets[i]) {
      if (copy != text) free(copy);
      return false;
    }
    memcpy(copy, attrs[ATTR_CPUSET + i].text, attrs[ATTR_CPUSET + i].size);
    copy[attrs[ATTR_CPUSET + i].size] = '\0';
    int bad = hwloc_bitmap_sscanf(e->sets[i], copy);
    if (copy != text) free(copy);
    if (bad) return false;
  }
  return true;
}

static void free_sets(element *e) {
  for (int i = 0; i < 4; i++) {
    hwloc_bitmap_free(e->sets[i]);
    e->sets[i] = NULL;
  }
}

/* What the sets of the kept object e must say: a PU is its CPU, in the cpuset and
 * complete_cpuset of every normal object around it, once in the machine; a NUMA node is
 * its node, in the nodesets of every normal object around it, once; normal objects kept
 * in one object come in hwloc's order (by the first CPU of their complete_cpuset, empty
 * last), or hwloc reorders them with a banner on stderr. */
static inferd_code check_sets(reader *r, element *e, unsigned os_index) {
  const xml_type *type = e->type;
  if (type->kind == KIND_NORMAL) {
    element *holder = kept_holder(r, r->depth);
    int first = hwloc_bitmap_first(e->sets[1]);
    long key = first < 0 ? LONG_MAX : first;
    if (holder && key < holder->last_first)
      return bad(r, e->at, "object %s comes after an object of higher CPUs (hwloc exports them in order)", type->name);
    if (holder) holder->last_first = key;
    e->last_first = -1;
  }
  if (type->rank == RANK_PU || type->kind == KIND_MEMORY) {
    bool pu = type->rank == RANK_PU;
    const hwloc_bitmap_t own = e->sets[pu ? 0 : 2], seen = pu ? r->pus_seen : r->nodes_seen;
    if (hwloc_bitmap_weight(own) != 1 || !hwloc_bitmap_isset(own, os_index) || !hwloc_bitmap_isset(e->sets[pu ? 1 : 3], os_index))
      return bad(r, e->at, "object %s %u: its %s is not {%u}", type->name, os_index, pu ? "cpuset" : "nodeset", os_index);
    if (hwloc_bitmap_isset(seen, os_index)) return bad(r, e->at, "a second %s %u", type->name, os_index);
    hwloc_bitmap_set(seen, os_index);
    for (int i = r->depth - 1; i >= 1; i--) {
      element *around = &r->stack[i];
      if (!is_kept_normal(around)) continue;
      if (!hwloc_bitmap_isset(around->sets[pu ? 0 : 2], os_index) || !hwloc_bitmap_isset(around->sets[pu ? 1 : 3], os_index))
        return bad(r, e->at, "%s %u is not in the %s of the %s around it (line %d)", type->name, os_index,
                   pu ? "cpusets" : "nodesets", around->type->name, line_of(r, around->at));
      if (pu) around->pus++;
    }
  }
  return INFERD_OK;
}

/* The object e (stack[r->depth], not pushed yet) with these attributes: where it may be,
 * what it must carry, and its tag in the output. */
static inferd_code open_object(reader *r, element *e, const slice *attrs, bool closed) {
  const element *parent = &r->stack[r->depth - 1];
  size_t at = e->at;
  slice type_name = attrs[ATTR_TYPE];
  if (!type_name.text) return bad(r, at, "object without a type");
  const xml_type *type = find_type(type_name.text, type_name.size);
  if (!type) return bad(r, at, "unknown object type '%.*s'", (int)CORE_MIN(type_name.size, 40), type_name.text);
  if (parent->dropped) {
    if (type->kind != KIND_SPECIAL) return bad(r, at, "object %s inside an I/O, Misc or other element left out", type->name);
    e->dropped = true;
    return INFERD_OK;
  }
  const xml_type *holder = parent->type; /* NULL: the topology */
  if (!holder && (type != &MACHINE || r->have_root)) return bad(r, at, "the root object must be one Machine, not %s", type->name);
  if (holder && type == &MACHINE) return bad(r, at, "object Machine inside object %s", holder->name);
  if (holder && ((holder->kind == KIND_MEMORY && (holder->fate == FATE_KEEP || type->kind != KIND_MEMORY)) ||
                 (holder->rank == RANK_PU && type->kind != KIND_SPECIAL)))
    return bad(r, at, "object %s inside object %s", type->name, holder->name);
  e->outermost = parent->outermost;
  if (type->fate == FATE_DROP) {
    e->dropped = true;
    return INFERD_OK;
  }
  e->type = type;
  if (type->fate == FATE_UNWRAP) return INFERD_OK;

  /* kept */
  if (type->kind == KIND_NORMAL && e->outermost) {
    const xml_type *outer = e->outermost;
    if (type->rank == RANK_ANY ? outer->rank >= RANK_CORE : type->rank <= outer->rank)
      return bad(r, at, "object %s inside object %s", type->name, outer->name);
  }
  if (type->kind == KIND_NORMAL && (!e->outermost || type->rank > e->outermost->rank)) e->outermost = type;
  if (++r->objects > TOPO_MAX_XML_OBJECTS) return bad(r, at, "more than %d objects", TOPO_MAX_XML_OBJECTS);
  if (type->kind == KIND_MEMORY && ++r->nodes > TOPO_MAX_NUMA_NODES)
    return bad(r, at, "more than %d NUMA nodes", TOPO_MAX_NUMA_NODES);
  for (int a = ATTR_CPUSET; a <= ATTR_COMPLETE_NODESET; a++)
    if (!attrs[a].text) return bad(r, at, "object %s without %s", type->name, ATTR_NAMES[a]);
  for (int a = ATTR_CPUSET; a <= ATTR_ALLOWED_NODESET; a++)
    if (attrs[a].text && !read_set(attrs[a]))
      return bad(r, at, "object %s: %s '%.*s' is not a set like 0x000000ff of numbers 0 to %d", type->name,
                 ATTR_NAMES[a], (int)CORE_MIN(attrs[a].size, 40), attrs[a].text, TOPO_MAX_CPU_NUMBER);
  uint64_t os_index = 0, max_index = type->numbered ? TOPO_MAX_CPU_NUMBER : INT32_MAX, bytes;
  if (type->numbered && !attrs[ATTR_OS_INDEX].text) return bad(r, at, "object %s without os_index", type->name);
  if (attrs[ATTR_OS_INDEX].text && !read_number(attrs[ATTR_OS_INDEX], max_index, &os_index))
    return bad(r, at, "object %s: os_index '%.*s' is not a number from 0 to %llu", type->name,
               (int)CORE_MIN(attrs[ATTR_OS_INDEX].size, 40), attrs[ATTR_OS_INDEX].text, (unsigned long long)max_index);
  bool memory = type->kind == KIND_MEMORY && attrs[ATTR_LOCAL_MEMORY].text;
  if (memory && !read_number(attrs[ATTR_LOCAL_MEMORY], UINT64_MAX, &bytes))
    return bad(r, at, "object %s: local_memory is not a number of bytes", type->name);
  if (!parse_sets(e, attrs)) return core_fail(r->status, INFERD_NO_MEMORY, "topology: out of memory");
  for (int a = ATTR_ALLOWED_CPUSET; !holder && a <= ATTR_ALLOWED_NODESET; a++) {
    slice text = attrs[a];
    if (!text.text) continue;
    char *copy = malloc(text.size + 1);
    r->allowed[a - ATTR_ALLOWED_CPUSET] = hwloc_bitmap_alloc();
    if (copy) memcpy(copy, text.text, text.size), copy[text.size] = '\0';
    if (!copy || !r->allowed[a - ATTR_ALLOWED_CPUSET] || hwloc_bitmap_sscanf(r->allowed[a - ATTR_ALLOWED_CPUSET], copy)) {
      free(copy);
      return core_fail(r->status, INFERD_NO_MEMORY, "topology: out of memory");
    }
    free(copy);
  }
  inferd_code rc = check_sets(r, e, (unsigned)os_index);
  if (rc != INFERD_OK) return rc;

  out_str(r, "<object type=\"");
  out_str(r, type->name);
  out_str(r, "\"");
  if (attrs[ATTR_OS_INDEX].text) out_attr(r, "os_index", attrs[ATTR_OS_INDEX]);
  for (int a = ATTR_CPUSET; a <= ATTR_COMPLETE_NODESET; a++) out_attr(r, ATTR_NAMES[a], attrs[a]);
  for (int a = ATTR_ALLOWED_CPUSET; !holder && a <= ATTR_ALLOWED_NODESET; a++)
    if (attrs[a].text) out_attr(r, ATTR_NAMES[a], attrs[a]);
  if (memory) out_attr(r, "local_memory", attrs[ATTR_LOCAL_MEMORY]);
  if (type->cache_depth) {
    char cache[48];
    snprintf(cache, sizeof cache, " depth=\"%d\" cache_type=\"0\"", type->cache_depth);
    out_str(r, cache);
  }
  out_str(r, closed ? "/>\n" : ">\n");
  if (!holder) r->have_root = true;
  return INFERD_OK;
}

/* The end of the object e (its </object>, or the "/>" of its tag), popped already. */
static inferd_code close_object(reader *r, element *e, bool closed) {
  const xml_type *type = e->type;
  inferd_code rc = INFERD_OK;
  if (!type || type->fate != FATE_KEEP) return INFERD_OK;
  if (type->kind == KIND_NORMAL && type->rank != RANK_PU) {
    if (!e->holds_normal) rc = bad(r, e->at, "object %s holds no PU", type->name);
    else if (hwloc_bitmap_weight(e->sets[0]) != e->pus) /* (its PUs are in it, once each) */
      rc = bad(r, e->at, "object %s: its cpuset has CPUs that are not its PUs", type->name);
  }
  element *holder = kept_holder(r, r->depth);
  if (holder && type->kind == KIND_NORMAL) holder->holds_normal = true;
  if (!closed) out_str(r, "</object>\n");
  free_sets(e);
  return rc;
}

/* The elements inside <topology>, up to its end tag. */
static inferd_code read_elements(reader *r) {
  for (;;) {
    element *parent = &r->stack[r->depth - 1];
    /* text: blanks, or anything inside an element left out */
    for (; r->at < r->size && r->text[r->at] != '<'; r->at++)
      if (!is_space(r->text[r->at]) && !parent->dropped)
        return bad(r, r->at, "text inside <%.*s>", (int)parent->name.size, parent->name.text);
    if (r->at >= r->size)
      return bad(r, r->at, "the document ends inside <%.*s>", (int)parent->name.size, parent->name.text);
    size_t at = r->at++;
    inferd_code rc;
    if (at_text(r, "/")) { /* </name>, exactly */
      size_t n = span(r, r->at + 1, NAME_CHARS);
      if (n != parent->name.size || memcmp(r->text + r->at + 1, parent->name.text, n) || r->size - r->at < n + 2 ||
          r->text[r->at + 1 + n] != '>')
        return bad(r, at, "expected </%.*s>", (int)parent->name.size, parent->name.text);
      r->at += n + 2;
      if (r->depth == 1) return INFERD_OK; /* </topology> */
      r->depth--;
      if ((rc = close_object(r, parent, false)) != INFERD_OK) return rc;
      continue;
    }
    size_t n = span(r, r->at, NAME_CHARS);
    if (!n) return bad(r, at, "expected an element <name ...>");
    if (r->depth >= XML_MAX_DEPTH) return bad(r, at, "elements nested more than %d deep", XML_MAX_DEPTH);
    element *e = &r->stack[r->depth];
    *e = (element){.name = {r->text + r->at, n}, .at = at};
    r->at += n;
    bool object = slice_is(e->name, "object"), closed = false;
    slice attrs[ATTR_COUNT] = {{0}};
    if ((rc = read_attributes(r, object ? attrs : NULL, &closed)) != INFERD_OK) return rc;
    if (!object) e->dropped = true; /* info, page_type, distances2, ...: left out */
    else if ((rc = open_object(r, e, attrs, closed)) != INFERD_OK) return rc;
    if (!closed) r->depth++;
    else if ((rc = close_object(r, e, true)) != INFERD_OK) return rc;
  }
}

/* <topology version="2.N"> after the prolog (<?xml ...?>, <!DOCTYPE ...>). */
static inferd_code read_topology_tag(reader *r) {
  for (;;) {
    skip_space(r);
    const char *end = at_text(r, "<?") ? "?>" : at_text(r, "<!") ? ">" : NULL;
    if (!end) break;
    size_t from = r->at;
    for (r->at += 2; r->at < r->size && !at_text(r, end); r->at++)
      if (r->text[r->at] == '<') break;
    if (r->at >= r->size || r->text[r->at] == '<') return bad(r, from, "unterminated <%c", r->text[from + 1]);
    r->at += strlen(end);
  }
  size_t at = r->at;
  static const char want[] = "expected <topology version=\"2.0\"> (an hwloc 2 export: lstopo --of xml)";
  if (!at_text(r, "<topology")) return bad(r, at, "%s", want);
  r->at += strlen("<topology");
  slice version = {0};
  bool closed;
  for (;;) { /* read_attributes keeps object attributes only */
    size_t before = r->at;
    skip_space(r);
    if (at_text(r, ">") || at_text(r, "/>")) break;
    if (r->at == before) return bad(r, at, "%s", want);
    slice name, value;
    inferd_code rc = read_attribute(r, &name, &value);
    if (rc != INFERD_OK) return rc;
    if (slice_is(name, "version")) version = value;
  }
  closed = r->text[r->at] == '/';
  r->at += closed ? 2 : 1;
  const char *dot = version.text ? memchr(version.text, '.', version.size) : NULL;
  uint64_t major = 0, minor;
  if (!dot || !read_number((slice){version.text, (size_t)(dot - version.text)}, 99, &major) ||
      !read_number((slice){dot + 1, version.size - (size_t)(dot - version.text) - 1}, 99, &minor) || major != 2)
    return bad(r, at, "%s", want);
  if (closed) return bad(r, at, "an empty topology");
  r->stack[0] = (element){.name = {"topology", 8}, .at = at};
  r->depth = 1;
  return INFERD_OK;
}

inferd_code topo__xml_rewrite(const char *text, size_t size, const char *source, char **out, size_t *out_size,
                              inferd_status *st) {
  *out = NULL;
  *out_size = 0;
  if (size > TOPO_MAX_XML_BYTES)
    return core_fail(st, INFERD_INVALID_ARG, "topology: %s is larger than %d MiB", source, TOPO_MAX_XML_BYTES >> 20);
  reader *r = calloc(1, sizeof *r);
  if (!r) return core_fail(st, INFERD_NO_MEMORY, "topology: out of memory");
  *r = (reader){.text = text, .size = size, .source = source, .status = st, .pus_seen = hwloc_bitmap_alloc(),
                .nodes_seen = hwloc_bitmap_alloc()};
  const char *nul = memchr(text, '\0', size);
  inferd_code rc = !r->pus_seen || !r->nodes_seen ? core_fail(st, INFERD_NO_MEMORY, "topology: out of memory")
                   : nul                          ? bad(r, (size_t)(nul - text), "a NUL byte")
                                                  : read_topology_tag(r);
  if (rc == INFERD_OK) {
    out_str(r, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<topology version=\"2.0\">\n");
    rc = read_elements(r);
  }
  if (rc == INFERD_OK) {
    skip_space(r);
    if (r->at != size) rc = bad(r, r->at, "text after </topology>");
    else if (!r->have_root) rc = bad(r, r->at, "no Machine object");
    else if (!r->nodes) rc = bad(r, r->at, "no NUMA node (hwloc 2 exports have one at least)");
    /* hwloc leaves out what the allowed sets leave out, and fails when that is everything */
    else if ((r->allowed[0] && !hwloc_bitmap_intersects(r->allowed[0], r->pus_seen)) ||
             (r->allowed[1] && !hwloc_bitmap_intersects(r->allowed[1], r->nodes_seen)))
      rc = bad(r, r->stack[1].at, "the Machine's allowed_cpuset or allowed_nodeset allows no PU or NUMA node");
  }
  if (rc == INFERD_OK) {
    out_str(r, "</topology>\n");
    if (r->out_of_memory) rc = core_fail(st, INFERD_NO_MEMORY, "topology: out of memory");
  }
  if (rc == INFERD_OK) {
    *out = r->out;
    *out_size = r->out_size;
  } else {
    free(r->out);
  }
  for (int i = 0; i < XML_MAX_DEPTH; i++) free_sets(&r->stack[i]);
  hwloc_bitmap_free(r->pus_seen);
  hwloc_bitmap_free(r->nodes_seen);
  hwloc_bitmap_free(r->allowed[0]);
  hwloc_bitmap_free(r->allowed[1]);
  free(r);
  return rc;
}
