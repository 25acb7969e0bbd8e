/*
 * archive_internal.h - what the files of src/archive/ share; nothing outside
 * src/archive/ includes it. Names carry the archive__ prefix.
 *
 * The reader (archive_read.c) and the writer (archive_write.c) must agree on which
 * entry names an archive may hold: the writer checks every name it plans with the
 * reader's own rule, so `inferd archive` never writes an archive the server refuses.
 */
#ifndef INFERD_ARCHIVE_INTERNAL_H
#define INFERD_ARCHIVE_INTERNAL_H

#include <stdbool.h>

/* Directories an entry may sit in (or be, for a zip's directory entry): the model
 * directory's walk stops there (its recursion is bounded), so a .mar and a manifest
 * are held to it too, and all three forms of the store take the same names. */
enum { ARCHIVE__MAX_DIRECTORIES = 15 };

/* A relative path that stays inside the archive: no leading '/', no backslash, no
 * control character, no empty, "." or ".." component, at most 4096 bytes and
 * ARCHIVE__MAX_DIRECTORIES directories deep. A trailing '/' (a directory entry of a
 * zip) is allowed when `directory_ok`. Any thread. */
bool archive__valid_entry_name(const char *name, bool directory_ok);

#endif /* INFERD_ARCHIVE_INTERNAL_H */
