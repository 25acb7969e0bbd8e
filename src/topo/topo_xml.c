/*
 * topo_xml.c - an hwloc XML export (lstopo --of xml), checked and rewritten before hwloc
 * reads it.
 *
 * DESIGN
 * hwloc's XML import trusts its input. hwloc 2.9 dereferences NULL when an object of a
 * version 2 export has no complete_cpuset (a NUMA node no complete_nodeset); a malformed
 * attribute stops its reader in the middle of an object, which then lacks what followed
 * (the same crash); its failure paths leak the objects read so far. So topo_new never
 * gives hwloc the text it was given: libxml2 reads it, this file checks what it read and
 * gives hwloc a new document holding what inferd uses, in the form hwloc writes:
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
 * The text is read by libxml2's xmlTextReader, which streams (memory stays bounded
 * whatever the size), as UTF-8 whatever it declares (hwloc writes UTF-8; this keeps
 * iconv out, whose errors libxml2 prints). Nothing is fetched and no entity expanded
 * (XML_PARSE_NONET; no NOENT, DTDLOAD or HUGE): hwloc's <!DOCTYPE topology SYSTEM
 * "hwloc2.dtd"> is never read, and a DOCTYPE that declares anything is refused. Any
 * error libxml2 reports refuses the text, recoverable ones too (it drops an undeclared
 * entity from an attribute value and goes on); errors go to this reader's handler, never
 * to stderr, and the first one is the message. Inside <topology version="2.N"> and the
 * objects kept or unwrapped: elements and blanks (comments and processing instructions
 * are skipped). No NUL byte. A set is comma-separated words of "0x" and 1 to 8 hex
 * digits, most significant first (a zero word between two others may be empty, as hwloc
 * writes it: "0x000000ff,,0x0"), of at most TOPO_MAX_CPU_NUMBER + 1 bits: no infinite
 * set. A number is decimal digits. PUs and NUMA nodes need an os_index, at most
 * TOPO_MAX_CPU_NUMBER.
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
 * NUMA nodes, elements MAX_DEPTH deep (hwloc's reader recurses). The work is linear in
 * the text and in PUs times depth.
 *
 * topo_machine.c checks what hwloc built again (each CPU in one core, distinct NUMA
 * node numbers), for every kind of machine.
 *
 * Any thread: libxml2 keeps its state in each reader, and is initialised once.
 */
#include <ctype.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/parser.h>
#include <libxml/xmlreader.h>

#include "core/core.h"
#include "topo/topo_internal.h"

enum { MAX_DEPTH = 64, MAX_SET_WORDS = (TOPO_MAX_CPU_NUMBER + 1) / 32 };

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

static const xml_type *find_type(const char *name) {
  if (!strcmp(name, MACHINE.name)) return &MACHINE;
  for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
    if (!strcmp(name, TYPES[i].name)) return &TYPES[i];
  return NULL;
}

/* ---- the reader ----------------------------------------------------------------------- */

/* The attributes read: an object's that are kept, and <topology>'s version. */
enum { ATTR_TYPE, ATTR_OS_INDEX, ATTR_CPUSET, ATTR_COMPLETE_CPUSET, ATTR_NODESET, ATTR_COMPLETE_NODESET,
       ATTR_ALLOWED_CPUSET, ATTR_ALLOWED_NODESET, ATTR_LOCAL_MEMORY, ATTR_VERSION, ATTR_COUNT };
static const char *const ATTR_NAMES[ATTR_COUNT] = {"type", "os_index", "cpuset", "complete_cpuset", "nodeset",
                                                   "complete_nodeset", "allowed_cpuset", "allowed_nodeset",
                                                   "local_memory", "version"};

/* An open element. */
typedef struct element {
  long line;                 /* of its start tag, for messages */
  bool dropped;              /* left out, with all it holds */
  const xml_type *type;      /* an object that is not dropped */
  const xml_type *outermost; /* the kept normal object of the highest rank around it, itself included */
  /* kept objects, and <topology> */
  xmlNode *out;              /* its copy in the document written */
  hwloc_bitmap_t sets[4];    /* cpuset, complete_cpuset, nodeset, complete_nodeset */
  int pus;                   /* normal: the PUs inside it */
  bool holds_normal;         /* normal: a kept normal object is inside (through unwrapped ones) */
  long last_first;           /* normal: the first CPU of the complete_cpuset of the last normal
                                object kept inside (LONG_MAX: an empty one), -1 before any */
} element;

typedef struct reader {
  const char *source; /* for messages: "xml FILE" */
  element stack[MAX_DEPTH];
  int depth;          /* open elements; stack[0] is <topology> */
  int objects, nodes; /* kept */
  long machine_line;  /* 0: no Machine yet */
  bool declarations;  /* the DOCTYPE declares something */
  hwloc_bitmap_t pus_seen, nodes_seen, allowed[2]; /* allowed: the root's allowed_cpuset, allowed_nodeset */
  xmlDoc *out;        /* the document written */
  bool xml_failed;    /* libxml2 reported an error: */
  int xml_error_line;
  char xml_error[200];
  inferd_status *status;
} reader;

/* INVALID_ARG: "topology: xml FILE line N: what". */
static inferd_code bad(reader *r, long line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inferd_code bad(reader *r, long line, const char *fmt, ...) {
  char what[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return core_fail(r->status, INFERD_INVALID_ARG, "topology: %s line %ld: %s", r->source, line, what);
}

static const char EXPECTED_TOPOLOGY[] = "expected <topology version=\"2.0\"> (an hwloc 2 export: lstopo --of xml)";

/* libxml2's errors, reported to this reader only (nothing is printed): the first error,
 * recoverable or not, is kept; warnings are not errors. libxml2 2.9's reader says "Extra
 * content at the end of the document" for a document cut short or without an element
 * too: those get messages of their own. */
static void on_xml_error(void *data, xmlErrorPtr error) {
  reader *r = data;
  if (error->level < XML_ERR_ERROR || r->xml_failed) return;
  r->xml_failed = true;
  r->xml_error_line = error->line;
  const xmlParserCtxt *parser = error->ctxt;
  if (error->code == XML_ERR_DOCUMENT_END && parser && parser->nameNr > 0 && parser->name)
    snprintf(r->xml_error, sizeof r->xml_error, "the document ends inside <%.40s>", (const char *)parser->name);
  else if (error->code == XML_ERR_DOCUMENT_END && parser && !xmlDocGetRootElement(parser->myDoc))
    snprintf(r->xml_error, sizeof r->xml_error, "%s", EXPECTED_TOPOLOGY);
  else
    snprintf(r->xml_error, sizeof r->xml_error, "%s", error->message ? error->message : "not well-formed XML");
  size_t n = strlen(r->xml_error); /* libxml2's messages end in a newline */
  while (n && isspace((unsigned char)r->xml_error[n - 1])) r->xml_error[--n] = '\0';
}

/* The attributes of an element named in ATTR_NAMES, into attrs[] (NULL: absent),
 * borrowed from the reader until its next node. */
static inferd_code read_attributes(reader *r, const xmlNode *node, long line, const char **attrs) {
  for (const xmlAttr *a = node->properties; a; a = a->next) {
    for (int i = 0; !a->ns && i < ATTR_COUNT; i++) {
      if (strcmp((const char *)a->name, ATTR_NAMES[i])) continue;
      const xmlNode *text = a->children; /* plain text, unless an entity reference is in it */
      if (text && (text->type != XML_TEXT_NODE || text->next))
        return bad(r, line, "attribute %s holds an entity reference", ATTR_NAMES[i]);
      attrs[i] = text ? (const char *)text->content : "";
    }
  }
  return INFERD_OK;
}

/* ---- values --------------------------------------------------------------------------- */

/* Decimal digits of a value at most max (at least 9). */
static bool read_number(const char *text, size_t size, uint64_t max, uint64_t *value) {
  uint64_t v = 0;
  if (!size) return false;
  for (size_t i = 0; i < size; i++) {
    if (text[i] < '0' || text[i] > '9') return false;
    unsigned digit = (unsigned)(text[i] - '0');
    if (v > (max - digit) / 10) return false;
    v = v * 10 + digit;
  }
  *value = v;
  return true;
}

/* hwloc's set text, words of 32 bits most significant first: "0x000000ff,0x00000001";
 * hwloc writes a zero word between two others as nothing ("0x0000ffff,,0x0"). 1 to
 * MAX_SET_WORDS words. */
static bool read_set(const char *s) {
  for (int words = 1; words <= MAX_SET_WORDS; words++) {
    if (words == 1 || *s != ',') { /* else an empty word, between two others */
      if (s[0] != '0' || s[1] != 'x') return false;
      size_t digits = strspn(s + 2, "0123456789abcdefABCDEF");
      if (digits < 1 || digits > 8) return false;
      s += 2 + digits;
    }
    if (!*s) return true;
    if (*s++ != ',') return false;
  }
  return false;
}

/* ---- objects ----------------------------------------------------------------------------- */

/* The nearest kept object around stack[depth] (unwrapped ones are transparent), or NULL. */
static element *kept_holder(reader *r, int depth) {
  for (int i = depth - 1; i >= 1; i--)
    if (r->stack[i].type && r->stack[i].type->fate == FATE_KEEP) return &r->stack[i];
  return NULL;
}

static bool is_kept_normal(const element *e) { return e->type && e->type->fate == FATE_KEEP && e->type->kind == KIND_NORMAL; }

/* The sets of a kept object, parsed (their text was checked by read_set). */
static bool parse_sets(element *e, const char *const *attrs) {
  for (int i = 0; i < 4; i++)
    if (!(e->sets[i] = hwloc_bitmap_alloc()) || hwloc_bitmap_sscanf(e->sets[i], attrs[ATTR_CPUSET + i])) return false;
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
      return bad(r, e->line, "object %s comes after an object of higher CPUs (hwloc exports them in order)", type->name);
    if (holder) holder->last_first = key;
    e->last_first = -1;
  }
  if (type->rank == RANK_PU || type->kind == KIND_MEMORY) {
    bool pu = type->rank == RANK_PU;
    const hwloc_bitmap_t own = e->sets[pu ? 0 : 2], seen = pu ? r->pus_seen : r->nodes_seen;
    if (hwloc_bitmap_weight(own) != 1 || !hwloc_bitmap_isset(own, os_index) || !hwloc_bitmap_isset(e->sets[pu ? 1 : 3], os_index))
      return bad(r, e->line, "object %s %u: its %s is not {%u}", type->name, os_index, pu ? "cpuset" : "nodeset", os_index);
    if (hwloc_bitmap_isset(seen, os_index)) return bad(r, e->line, "a second %s %u", type->name, os_index);
    hwloc_bitmap_set(seen, os_index);
    for (int i = r->depth - 1; i >= 1; i--) {
      element *around = &r->stack[i];
      if (!is_kept_normal(around)) continue;
      if (!hwloc_bitmap_isset(around->sets[pu ? 0 : 2], os_index) || !hwloc_bitmap_isset(around->sets[pu ? 1 : 3], os_index))
        return bad(r, e->line, "%s %u is not in the %s of the %s around it (line %ld)", type->name, os_index,
                   pu ? "cpusets" : "nodesets", around->type->name, around->line);
      if (pu) around->pus++;
    }
  }
  return INFERD_OK;
}

/* name="value" on an object of the document written; false when out of memory. */
static bool write_attribute(xmlNode *object, const char *name, const char *value) {
  return xmlNewProp(object, BAD_CAST name, BAD_CAST value) != NULL;
}

/* The kept object e: its copy in the document written, inside the nearest kept object
 * around it (or <topology>). */
static inferd_code write_object(reader *r, element *e, const char *const *attrs, bool root) {
  const element *holder = kept_holder(r, r->depth);
  e->out = xmlNewChild(holder ? holder->out : r->stack[0].out, NULL, BAD_CAST "object", NULL);
  bool written = e->out && write_attribute(e->out, "type", e->type->name);
  if (attrs[ATTR_OS_INDEX]) written = written && write_attribute(e->out, "os_index", attrs[ATTR_OS_INDEX]);
  for (int a = ATTR_CPUSET; a <= ATTR_ALLOWED_NODESET; a++)
    if (attrs[a] && (a < ATTR_ALLOWED_CPUSET || root)) written = written && write_attribute(e->out, ATTR_NAMES[a], attrs[a]);
  if (e->type->kind == KIND_MEMORY && attrs[ATTR_LOCAL_MEMORY])
    written = written && write_attribute(e->out, "local_memory", attrs[ATTR_LOCAL_MEMORY]);
  if (e->type->cache_depth) {
    char depth[16];
    snprintf(depth, sizeof depth, "%d", e->type->cache_depth);
    written = written && write_attribute(e->out, "depth", depth) && write_attribute(e->out, "cache_type", "0");
  }
  return written ? INFERD_OK : core_fail(r->status, INFERD_NO_MEMORY, "topology: out of memory");
}

/* The object e (stack[r->depth], not pushed yet) with these attributes: where it may be,
 * what it must carry, and its copy in the document written. */
static inferd_code open_object(reader *r, element *e, const char *const *attrs) {
  const element *parent = &r->stack[r->depth - 1];
  long line = e->line;
  if (!attrs[ATTR_TYPE]) return bad(r, line, "object without a type");
  const xml_type *type = find_type(attrs[ATTR_TYPE]);
  if (!type) return bad(r, line, "unknown object type '%.40s'", attrs[ATTR_TYPE]);
  if (parent->dropped) {
    if (type->kind != KIND_SPECIAL) return bad(r, line, "object %s inside an I/O, Misc or other element left out", type->name);
    e->dropped = true;
    return INFERD_OK;
  }
  const xml_type *holder = parent->type; /* NULL: the topology */
  if (!holder && (type != &MACHINE || r->machine_line)) return bad(r, line, "the root object must be one Machine, not %s", type->name);
  if (holder && type == &MACHINE) return bad(r, line, "object Machine inside object %s", holder->name);
  if (holder && ((holder->kind == KIND_MEMORY && (holder->fate == FATE_KEEP || type->kind != KIND_MEMORY)) ||
                 (holder->rank == RANK_PU && type->kind != KIND_SPECIAL)))
    return bad(r, line, "object %s inside object %s", type->name, holder->name);
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
      return bad(r, line, "object %s inside object %s", type->name, outer->name);
  }
  if (type->kind == KIND_NORMAL && (!e->outermost || type->rank > e->outermost->rank)) e->outermost = type;
  if (++r->objects > TOPO_MAX_XML_OBJECTS) return bad(r, line, "more than %d objects", TOPO_MAX_XML_OBJECTS);
  if (type->kind == KIND_MEMORY && ++r->nodes > TOPO_MAX_NUMA_NODES)
    return bad(r, line, "more than %d NUMA nodes", TOPO_MAX_NUMA_NODES);
  for (int a = ATTR_CPUSET; a <= ATTR_COMPLETE_NODESET; a++)
    if (!attrs[a]) return bad(r, line, "object %s without %s", type->name, ATTR_NAMES[a]);
  for (int a = ATTR_CPUSET; a <= ATTR_ALLOWED_NODESET; a++)
    if (attrs[a] && !read_set(attrs[a]))
      return bad(r, line, "object %s: %s '%.40s' is not a set like 0x000000ff of numbers 0 to %d", type->name,
                 ATTR_NAMES[a], attrs[a], TOPO_MAX_CPU_NUMBER);
  uint64_t os_index = 0, max_index = type->numbered ? TOPO_MAX_CPU_NUMBER : INT32_MAX, bytes;
  const char *index = attrs[ATTR_OS_INDEX], *memory = attrs[ATTR_LOCAL_MEMORY];
  if (type->numbered && !index) return bad(r, line, "object %s without os_index", type->name);
  if (index && !read_number(index, strlen(index), max_index, &os_index))
    return bad(r, line, "object %s: os_index '%.40s' is not a number from 0 to %llu", type->name, index,
               (unsigned long long)max_index);
  if (type->kind == KIND_MEMORY && memory && !read_number(memory, strlen(memory), UINT64_MAX, &bytes))
    return bad(r, line, "object %s: local_memory is not a number of bytes", type->name);
  if (!parse_sets(e, attrs)) return core_fail(r->status, INFERD_NO_MEMORY, "topology: out of memory");
  for (int a = ATTR_ALLOWED_CPUSET; !holder && a <= ATTR_ALLOWED_NODESET; a++) {
    hwloc_bitmap_t *allowed = &r->allowed[a - ATTR_ALLOWED_CPUSET];
    if (attrs[a] && (!(*allowed = hwloc_bitmap_alloc()) || hwloc_bitmap_sscanf(*allowed, attrs[a])))
      return core_fail(r->status, INFERD_NO_MEMORY, "topology: out of memory");
  }
  inferd_code rc = check_sets(r, e, (unsigned)os_index);
  if (rc == INFERD_OK) rc = write_object(r, e, attrs, !holder);
  if (rc == INFERD_OK && !holder) r->machine_line = line;
  return rc;
}

/* The end of the object e (stack[r->depth], popped already). */
static inferd_code close_object(reader *r, element *e) {
  const xml_type *type = e->type;
  inferd_code rc = INFERD_OK;
  if (!type || type->fate != FATE_KEEP) return INFERD_OK;
  if (type->kind == KIND_NORMAL && type->rank != RANK_PU) {
    if (!e->holds_normal) rc = bad(r, e->line, "object %s holds no PU", type->name);
    else if (hwloc_bitmap_weight(e->sets[0]) != e->pus) /* (its PUs are in it, once each) */
      rc = bad(r, e->line, "object %s: its cpuset has CPUs that are not its PUs", type->name);
  }
  element *holder = kept_holder(r, r->depth);
  if (holder && type->kind == KIND_NORMAL) holder->holds_normal = true;
  free_sets(e);
  return rc;
}

/* ---- elements --------------------------------------------------------------------------- */

/* <topology version="2.N">, the root, and the root of the document written. */
static inferd_code open_topology(reader *r, const xmlNode *node, long line) {
  if (r->declarations)
    return bad(r, line, "the DOCTYPE before <topology> declares entities, elements or attributes (hwloc's declares none)");
  const char *attrs[ATTR_COUNT] = {0};
  if (node->ns || strcmp((const char *)node->name, "topology")) return bad(r, line, "%s", EXPECTED_TOPOLOGY);
  inferd_code rc = read_attributes(r, node, line, attrs);
  if (rc != INFERD_OK) return rc;
  const char *version = attrs[ATTR_VERSION], *dot = version ? strchr(version, '.') : NULL;
  uint64_t major = 0, minor;
  if (!dot || !read_number(version, (size_t)(dot - version), 99, &major) || !read_number(dot + 1, strlen(dot + 1), 99, &minor) ||
      major != 2)
    return bad(r, line, "%s", EXPECTED_TOPOLOGY);
  xmlNode *root = xmlNewDocNode(r->out, NULL, BAD_CAST "topology", NULL);
  if (!root || !write_attribute(root, "version", "2.0")) {
    xmlFreeNode(root);
    return core_fail(r->status, INFERD_NO_MEMORY, "topology: out of memory");
  }
  xmlDocSetRootElement(r->out, root);
  r->stack[0] = (element){.line = line, .out = root};
  return INFERD_OK;
}

static inferd_code close_element(reader *r) {
  if (--r->depth == 0) return INFERD_OK; /* </topology> */
  return close_object(r, &r->stack[r->depth]);
}

/* A start tag (and its end, when empty): an object, <topology>, or another element, left out. */
static inferd_code open_element(reader *r, const xmlNode *node, bool empty) {
  long line = xmlGetLineNo(node);
  inferd_code rc = INFERD_OK;
  if (r->depth == 0) {
    rc = open_topology(r, node, line);
  } else {
    if (r->depth >= MAX_DEPTH) return bad(r, line, "elements nested more than %d deep", MAX_DEPTH);
    element *e = &r->stack[r->depth];
    *e = (element){.line = line, .dropped = true}; /* info, page_type, distances2, ...: left out */
    const char *attrs[ATTR_COUNT] = {0};
    if (!node->ns && !strcmp((const char *)node->name, "object")) {
      e->dropped = false;
      rc = read_attributes(r, node, line, attrs);
      if (rc == INFERD_OK) rc = open_object(r, e, attrs);
    }
  }
  if (rc != INFERD_OK) return rc;
  r->depth++;
  return empty ? close_element(r) : INFERD_OK;
}

/* The document, node by node, as libxml2's reader streams it. */
static inferd_code read_document(reader *r, xmlTextReader *xml) {
  int more;
  while ((more = xmlTextReaderRead(xml)) == 1 && !r->xml_failed) {
    const xmlNode *node = xmlTextReaderCurrentNode(xml);
    inferd_code rc = INFERD_OK;
    switch (xmlTextReaderNodeType(xml)) {
    case XML_READER_TYPE_ELEMENT: rc = open_element(r, node, xmlTextReaderIsEmptyElement(xml) == 1); break;
    case XML_READER_TYPE_END_ELEMENT: rc = close_element(r); break;
    case XML_READER_TYPE_DOCUMENT_TYPE: r->declarations = ((const xmlDtd *)node)->children != NULL; break;
    case XML_READER_TYPE_TEXT:
    case XML_READER_TYPE_CDATA:
    case XML_READER_TYPE_ENTITY_REFERENCE: /* (not blanks, which are other types) */
      if (r->depth > 0 && !r->stack[r->depth - 1].dropped)
        rc = bad(r, xmlGetLineNo(node), "text inside <%s>", r->depth == 1 ? "topology" : "object");
      break;
    default: break; /* blanks, comments, processing instructions */
    }
    if (rc != INFERD_OK) return rc;
  }
  if (r->xml_failed) return bad(r, r->xml_error_line, "%s", r->xml_error);
  if (more < 0) return bad(r, xmlTextReaderGetParserLineNumber(xml), "not well-formed XML");
  if (!r->machine_line) return bad(r, r->stack[0].line, "no Machine object");
  if (!r->nodes) return bad(r, r->stack[0].line, "no NUMA node (hwloc 2 exports have one at least)");
  /* hwloc leaves out what the allowed sets leave out, and fails when that is everything */
  if ((r->allowed[0] && !hwloc_bitmap_intersects(r->allowed[0], r->pus_seen)) ||
      (r->allowed[1] && !hwloc_bitmap_intersects(r->allowed[1], r->nodes_seen)))
    return bad(r, r->machine_line, "the Machine's allowed_cpuset or allowed_nodeset allows no PU or NUMA node");
  return INFERD_OK;
}

/* The document written, to hwloc. */
static inferd_code give_hwloc(reader *r, hwloc_topology_t hw) {
  xmlChar *text = NULL;
  int size = 0;
  xmlDocDumpFormatMemoryEnc(r->out, &text, &size, "UTF-8", 1);
  if (!text) return core_fail(r->status, INFERD_NO_MEMORY, "topology: out of memory");
  int failed = hwloc_topology_set_xmlbuffer(hw, (const char *)text, size + 1); /* (its size counts the NUL) */
  xmlFree(text);
  return failed ? core_fail(r->status, INFERD_INVALID_ARG, "topology: hwloc cannot read %s", r->source) : INFERD_OK;
}

static pthread_once_t xml_once = PTHREAD_ONCE_INIT;

inferd_code topo__xml_load(hwloc_topology_t hw, const char *text, size_t size, const char *source, inferd_status *st) {
  if (size > TOPO_MAX_XML_BYTES)
    return core_fail(st, INFERD_INVALID_ARG, "topology: %s is larger than %d MiB", source, TOPO_MAX_XML_BYTES >> 20);
  const char *nul = memchr(text, '\0', size);
  if (nul) {
    long line = 1;
    for (const char *c = text; c < nul; c++) line += *c == '\n';
    return core_fail(st, INFERD_INVALID_ARG, "topology: %s line %ld: a NUL byte", source, line);
  }
  pthread_once(&xml_once, xmlInitParser); /* (libxml2 2.9 wants one call before threads use it) */
  reader r = {.source = source, .status = st, .pus_seen = hwloc_bitmap_alloc(), .nodes_seen = hwloc_bitmap_alloc(),
              .out = xmlNewDoc(BAD_CAST "1.0")};
  xmlTextReader *xml = xmlReaderForMemory(text, (int)size, NULL, "UTF-8", XML_PARSE_NONET | XML_PARSE_BIG_LINES | XML_PARSE_IGNORE_ENC);
  inferd_code rc;
  if (!xml || !r.pus_seen || !r.nodes_seen || !r.out) {
    rc = core_fail(st, INFERD_NO_MEMORY, "topology: out of memory");
  } else {
    xmlTextReaderSetStructuredErrorHandler(xml, on_xml_error, &r);
    rc = read_document(&r, xml);
    if (rc == INFERD_OK) rc = give_hwloc(&r, hw);
  }
  xmlFreeTextReader(xml);
  for (int i = 0; i < MAX_DEPTH; i++) free_sets(&r.stack[i]);
  hwloc_bitmap_free(r.pus_seen);
  hwloc_bitmap_free(r.nodes_seen);
  hwloc_bitmap_free(r.allowed[0]);
  hwloc_bitmap_free(r.allowed[1]);
  xmlFreeDoc(r.out);
  return rc;
}
