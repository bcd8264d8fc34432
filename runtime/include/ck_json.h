/*
 * ck_json.h — a small, strict JSON reader for checkpoint metadata
 * (safetensors headers, *.safetensors.index.json). Plain C99.
 *
 * The whole document is parsed into one block of nodes; strings are
 * NUL-terminated copies (escapes decoded, \uXXXX to UTF-8). Depth and size
 * are bounded; every error says at which byte offset it happened.
 */
#ifndef CK_JSON_H
#define CK_JSON_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ck_json_type {
    CK_JSON_NULL, CK_JSON_BOOL, CK_JSON_NUMBER, CK_JSON_STRING, CK_JSON_ARRAY, CK_JSON_OBJECT
} ck_json_type;

typedef struct ck_json ck_json;
struct ck_json {
    ck_json_type type;
    double number;       /* NUMBER */
    int boolean;         /* BOOL */
    char *string;        /* STRING value; for object members, the key is in `key` */
    char *key;           /* set on members of an OBJECT */
    ck_json *child;      /* first element/member of ARRAY/OBJECT */
    ck_json *next;       /* next sibling */
    size_t count;        /* number of children */
};

typedef struct ck_json_doc ck_json_doc;

/* Parses text[0..len). Returns NULL and fills err on failure. */
ck_json_doc *ck_json_parse(const char *text, size_t len, char *err, size_t errlen);
const ck_json *ck_json_root(const ck_json_doc *doc);
void ck_json_free(ck_json_doc *doc);
/* Member of an object by key, or NULL. */
const ck_json *ck_json_get(const ck_json *obj, const char *key);

#ifdef __cplusplus
}
#endif
#endif /* CK_JSON_H */
