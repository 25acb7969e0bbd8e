/*
 * archive.h - the model store: opening a model as TorchServe accepts it, and writing
 * a .mar as torch-model-archiver does.
 *
 * A model comes in one of three forms:
 *   - a .mar: a zip file with MAR-INF/MANIFEST.json and, at its root, the serialized
 *     model (here: an .onnx file) and extra files such as index_to_name.json;
 *   - a directory of the same layout (an unpacked .mar, `--archive-format no-archive`);
 *   - a bare .onnx file: named after the file, version "1.0", no handler.
 * MANIFEST.json, as torch-model-archiver writes it:
 *   {"createdOn": "31/12/2024 23:59:59", "runtime": "python",
 *    "model": {"modelName": "m", "serializedFile": "m.onnx", "handler": "image_classifier",
 *              "modelVersion": "1.0"}, "archiverVersion": "0.12.0"}
 * modelName and modelVersion are required (as in TorchServe); serializedFile must name
 * an .onnx file of the archive.
 *
 * Everything from outside is validated before use: the JSON (errors carry jansson's
 * line and column), every entry name (no absolute paths, no "..", no backslashes, no
 * duplicates), the number of entries and the bytes they unpack to (zip bombs), and the
 * declared sizes against what actually inflates.
 *
 * Ownership: an archive_model owns all it returns (names, the ONNX bytes, the extra
 * files); pointers stay valid until archive_close (the ONNX bytes: until
 * archive_release_onnx). For a .mar the ONNX entry is mapped in place when it is stored
 * uncompressed, else inflated into memory of its own; for a directory or a bare .onnx
 * the file is mapped. Threading: an archive_model is
 * read-only after archive_open and may be read from any thread; the functions keep no
 * global state.
 */
#ifndef INFERD_ARCHIVE_H
#define INFERD_ARCHIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "inferd/inferd.h"

typedef struct archive_model archive_model;

typedef enum archive_kind {
  ARCHIVE_MAR,       /* a zip file */
  ARCHIVE_DIRECTORY, /* an unpacked archive */
  ARCHIVE_ONNX,      /* a bare .onnx file */
} archive_kind;

typedef struct archive_params {
  uint64_t max_total_bytes; /* bytes all entries of a .mar may unpack to; 0 = 4 GiB */
  uint32_t max_entries;     /* entries of a .mar or files of a directory; 0 = 10000 */
  uint64_t max_extra_bytes; /* bytes of the extra files read, together; 0 = 256 MiB */
  /* NULL: every extra file is read. Else only these (and the manifest's configFile):
   * the others are neither read nor listed, so an archive that also carries, say, the
   * PyTorch checkpoint costs neither its memory nor the max_extra_bytes it would take. */
  const char *const *only_files;
  int only_file_count;
  /* NULL, or called before the .onnx of a .mar is copied into memory (inflated, or read
   * from a .mar in memory; a stored one in a file is mapped instead), with its size: a
   * code other than INFERD_OK ends archive_open with that code and status. The caller
   * can refuse what would not fit before the memory is taken, not after. */
  inferd_code (*before_copy)(void *ctx, uint64_t onnx_bytes, inferd_status *st);
  void *before_copy_ctx;
} archive_params;

/* Opens the model at `path` (a .mar or other zip, a directory, or an .onnx file).
 * `params` may be NULL for the defaults. On success *out owns everything: free with
 * archive_close. On failure *out is NULL and status says what is wrong and where:
 * "resnet.mar: MAR-INF/MANIFEST.json: line 3, column 5: '}' expected near ']'". */
inferd_code archive_open(const char *path, const archive_params *params, archive_model **out,
                         inferd_status *status);
/* The same for a .mar held in memory (borrowed for the duration of the call). */
inferd_code archive_open_memory(const void *data, size_t size, const archive_params *params,
                                archive_model **out, inferd_status *status);
void archive_close(archive_model *model);

archive_kind archive_get_kind(const archive_model *model);
const char *archive_model_name(const archive_model *model);    /* manifest modelName */
const char *archive_model_version(const archive_model *model); /* manifest modelVersion */
/* The manifest's handler ("image_classifier"), or NULL (a bare .onnx, or none given). */
const char *archive_handler(const archive_model *model);
/* The manifest's configFile ("model-config.yaml"), or NULL: a file of the archive that
 * the server reads with config_model_yaml_parse (src/config). */
const char *archive_config_file(const archive_model *model);
/* The serializedFile as named in the manifest ("m.onnx"). */
const char *archive_serialized_file(const archive_model *model);
/* The whole MANIFEST.json text (NUL-terminated), or NULL for a bare .onnx. */
const char *archive_manifest_json(const archive_model *model);

/* The serialized ONNX model: pass to inferd_model_load_memory. NULL after
 * archive_release_onnx. */
const void *archive_onnx(const archive_model *model, size_t *size);
/* Drops the ONNX bytes (the engine keeps its own copy of the weights once loaded). */
void archive_release_onnx(archive_model *model);
/* True when the ONNX bytes lie in a read-only private mapping of the model store's
 * file (a bare .onnx, a directory's, or a .mar's stored entry): pass it on as
 * inferd_model_params.mapped_file. */
bool archive_onnx_mapped(const archive_model *model);
/* The directory of the .onnx file on disk (a bare .onnx, or a directory's): where its
 * external data lies (inferd_model_params.external_data_dir). NULL for a .mar, whose
 * model must hold its own weights. */
const char *archive_onnx_dir(const archive_model *model);

/* Extra files: every other regular file of the archive, by its path inside it
 * ("index_to_name.json", "config/labels.txt"). archive_file returns the bytes of the
 * named one (not NUL-terminated) or NULL when absent. */
int archive_file_count(const archive_model *model);
const void *archive_file_at(const archive_model *model, int index, const char **name, size_t *size);
const void *archive_file(const archive_model *model, const char *name, size_t *size);

/* MANIFEST.json alone (the fuzzer's entry point). Fills *out with copies owned by it;
 * free with archive_manifest_free (also after a failure). */
typedef struct archive_manifest {
  char *created_on;       /* NULL when absent */
  char *runtime;          /* NULL when absent */
  char *archiver_version; /* NULL when absent */
  char *model_name;
  char *model_version;
  char *serialized_file;
  char *handler; /* NULL when absent */
  char *config_file; /* model.configFile (torch-model-archiver --config-file), NULL when absent */
} archive_manifest;
inferd_code archive_manifest_parse(const void *json, size_t size, archive_manifest *out, inferd_status *status);
void archive_manifest_free(archive_manifest *manifest);

/* True for names TorchServe accepts: [A-Za-z0-9][A-Za-z0-9_.-]*, at most 255 bytes. */
bool archive_valid_model_name(const char *name);

/* ---- writing ------------------------------------------------------------------- */

typedef enum archive_format {
  ARCHIVE_FORMAT_DEFAULT,    /* EXPORT/NAME.mar: the .onnx stored (float weights hardly
                                compress, and inflating them slows every start), the
                                other files deflated */
  ARCHIVE_FORMAT_ZIP_STORE,  /* EXPORT/NAME.mar, every file stored */
  ARCHIVE_FORMAT_NO_ARCHIVE, /* the directory EXPORT/NAME */
} archive_format;

typedef struct archive_write_params {
  const char *model_name;      /* required; archive_valid_model_name */
  const char *serialized_file; /* required: path of the .onnx file */
  const char *handler;         /* required: a built-in handler's name (a plain word), or
                                  the path of a handler file (with a '/' or a '.'),
                                  which is copied into the archive */
  const char *version;         /* NULL: "1.0" */
  const char *config_file;     /* NULL, or a model-config.yaml: copied to the archive's root
                                  and named by the manifest's configFile */
  const char *const *extra_files; /* paths: files go to the archive's root, a directory's
                                     files keep their paths below it */
  int extra_file_count;
  const char *export_path; /* an existing directory; NULL: "." */
  archive_format format;
  bool force; /* replace an existing NAME.mar (or write into an existing directory) */
} archive_write_params;

/* Writes the archive. A .mar is written to a temporary file in export_path and renamed
 * into place, so a reader never sees half of one. On success, when out_path is not NULL,
 * the path written is copied there. Errors: ALREADY_EXISTS without force, NOT_FOUND for
 * a missing input file, INVALID_ARG for a bad name or a serialized file that is not an
 * .onnx, two inputs with the same name in the archive. */
inferd_code archive_write(const archive_write_params *params, char *out_path, size_t out_size,
                          inferd_status *status);

#endif /* INFERD_ARCHIVE_H */
