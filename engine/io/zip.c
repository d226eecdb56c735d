/* zip.c - the zip reader of torch.save archives (zip.h); each stage distrusts the file completely. */
#include "io/zip.h"

#include <stdlib.h>
#include <string.h>

/* Copies at most cap-1 bytes of s into buf, replacing non-printable bytes with '?', for error messages. */
const char *eng__printable(const char *s, size_t n, char *buf, size_t cap) {
    size_t k = 0;
    for (; k < n && k + 1 < cap; k++) buf[k] = (s[k] >= 0x20 && s[k] < 0x7f) ? s[k] : '?';
    buf[k] = 0;
    return buf;
}


static int cmp_entry(const void *a, const void *b) {
    const eng__zip_entry *x = a, *y = b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);
    return c ? c : (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

const eng__zip_entry *eng__zip_find(const eng__zip *z, const char *name, size_t len) {
    eng__zip_entry key = {.name = name, .name_len = len};
    return bsearch(&key, z->e, z->n, sizeof *z->e, cmp_entry);
}

/* Returns the data of a STORED, unencrypted entry, or fails naming it. */
int eng__zip_data(const eng__zip *z, const eng__zip_entry *e, const char *label, const uint8_t **data, eng_err *err) {
    char nb[160];
    const char *nm = eng__printable(e->name, e->name_len, nb, sizeof nb);
    if (e->flags & 1) return eng_err_set(err, ENG_UNSUPPORTED, "%s: zip entry '%s' is encrypted", label, nm);
    if (e->method != 0)
        return eng_err_set(err, ENG_UNSUPPORTED,
                           "%s: zip entry '%s' is compressed (method %u%s); only STORED entries are supported, as "
                           "torch.save writes them",
                           label, nm, e->method, e->method == 8 ? ", DEFLATE" : "");
    if (e->csize != e->usize)
        return eng_err_set(err, ENG_FORMAT, "%s: zip entry '%s' is STORED but its sizes differ", label, nm);
    *data = z->base + e->data_off;
    return 0;
}

/* Locates the central directory: the classic end record, or the ZIP64 one when its locator precedes it. */
static int zip_find_cd(const uint8_t *b, size_t len, const char *label, uint64_t *cd_off, uint64_t *cd_size,
                       uint64_t *count, uint64_t *cd_limit, eng_err *err) {
    if (len < 22) return eng_err_set(err, ENG_FORMAT, "%s: %zu bytes is too short for a zip archive", label, len);
    size_t lowest = len - 22 > 65535 ? len - 22 - 65535 : 0, p = len - 22;
    for (;; p--) {
        if (eng__rd32(b + p) == 0x06054b50 && p + 22 + eng__rd16(b + p + 20) <= len) break;
        if (p == lowest)
            return eng_err_set(err, ENG_FORMAT, "%s: no zip end-of-central-directory record (not a zip archive, or "
                                                "truncated)", label);
    }
    uint64_t disk = eng__rd16(b + p + 4), cd_disk = eng__rd16(b + p + 6), n_disk = eng__rd16(b + p + 8);
    *count = eng__rd16(b + p + 10);
    *cd_size = eng__rd32(b + p + 12);
    *cd_off = eng__rd32(b + p + 16);
    *cd_limit = p;
    if (p >= 20 && eng__rd32(b + p - 20) == 0x07064b50) {
        uint64_t z = eng__rd64(b + p - 20 + 8);
        if (z > p - 20 || p - 20 - z < 56 || eng__rd32(b + z) != 0x06064b50)
            return eng_err_set(err, ENG_FORMAT, "%s: ZIP64 end-of-central-directory locator points to no record",
                               label);
        disk = eng__rd32(b + z + 16);
        cd_disk = eng__rd32(b + z + 20);
        n_disk = eng__rd64(b + z + 24);
        *count = eng__rd64(b + z + 32);
        *cd_size = eng__rd64(b + z + 40);
        *cd_off = eng__rd64(b + z + 48);
        *cd_limit = z;
    } else if (*count == 0xffff || *cd_size == 0xffffffffu || *cd_off == 0xffffffffu) {
        return eng_err_set(err, ENG_FORMAT, "%s: zip end record needs a ZIP64 record that is missing", label);
    }
    if (disk || cd_disk || n_disk != *count)
        return eng_err_set(err, ENG_UNSUPPORTED, "%s: multi-disk zip archives are not supported", label);
    if (*cd_off > *cd_limit || *cd_size > *cd_limit - *cd_off)
        return eng_err_set(err, ENG_FORMAT, "%s: zip central directory lies outside the file", label);
    if (*count > *cd_size / 46)
        return eng_err_set(err, ENG_FORMAT, "%s: zip central directory is too small for %llu entries", label,
                           (unsigned long long)*count);
    return 0;
}

/* Reads the central directory into z (z->base/len set by the caller). */
int eng__zip_open(eng__zip *z, const char *label, eng_err *err) {
    const uint8_t *b = z->base;
    uint64_t cd_off = 0, cd_size = 0, count = 0, cd_limit = 0;
    int rc = zip_find_cd(b, z->len, label, &cd_off, &cd_size, &count, &cd_limit, err);
    if (rc) return rc;
    z->e = calloc(count ? count : 1, sizeof *z->e);
    if (!z->e) return eng_err_set(err, ENG_NO_MEMORY, "%s: out of memory for %llu zip entries", label,
                                  (unsigned long long)count);
    uint64_t q = cd_off, end = cd_off + cd_size;
    for (uint64_t i = 0; i < count; i++) {
        if (end - q < 46 || eng__rd32(b + q) != 0x02014b50)
            return eng_err_set(err, ENG_FORMAT, "%s: zip central directory entry %llu is malformed", label,
                               (unsigned long long)i);
        eng__zip_entry *e = &z->e[z->n];
        e->flags = eng__rd16(b + q + 8);
        e->method = eng__rd16(b + q + 10);
        e->csize = eng__rd32(b + q + 20);
        e->usize = eng__rd32(b + q + 24);
        uint64_t nl = eng__rd16(b + q + 28), xl = eng__rd16(b + q + 30), cl = eng__rd16(b + q + 32), lho = eng__rd32(b + q + 42);
        if (end - q - 46 < nl + xl + cl || nl == 0)
            return eng_err_set(err, ENG_FORMAT, "%s: zip central directory entry %llu overruns the directory",
                               label, (unsigned long long)i);
        e->name = (const char *)b + q + 46;
        e->name_len = nl;
        char nb[160];
        const char *nm = eng__printable(e->name, nl, nb, sizeof nb);
        if (memchr(e->name, 0, nl)) return eng_err_set(err, ENG_FORMAT, "%s: zip entry name '%s' has a NUL", label, nm);
        /* ZIP64 extra field: 8-byte values, in this order, for each field saturated above. */
        int need_u = e->usize == 0xffffffffu, need_c = e->csize == 0xffffffffu, need_o = lho == 0xffffffffu;
        for (uint64_t x = q + 46 + nl, xe = x + xl; xe - x >= 4;) {
            uint64_t id = eng__rd16(b + x), sz = eng__rd16(b + x + 2);
            if (sz > xe - x - 4)
                return eng_err_set(err, ENG_FORMAT, "%s: zip entry '%s': extra field overruns its header", label, nm);
            if (id == 1) {
                uint64_t r = x + 4, re = r + sz;
                if (need_u && re - r >= 8) e->usize = eng__rd64(b + r), r += 8, need_u = 0;
                if (need_c && re - r >= 8) e->csize = eng__rd64(b + r), r += 8, need_c = 0;
                if (need_o && re - r >= 8) lho = eng__rd64(b + r), r += 8, need_o = 0;
            }
            x += 4 + sz;
        }
        if (need_u || need_c || need_o)
            return eng_err_set(err, ENG_FORMAT, "%s: zip entry '%s' lacks its ZIP64 sizes", label, nm);
        /* The local header repeats the name; its extra field differs (torch pads it to align the data). */
        if (lho > cd_off || cd_off - lho < 30 || eng__rd32(b + lho) != 0x04034b50)
            return eng_err_set(err, ENG_FORMAT, "%s: zip entry '%s': local header out of bounds or malformed",
                               label, nm);
        uint64_t lnl = eng__rd16(b + lho + 26), lxl = eng__rd16(b + lho + 28);
        if (cd_off - lho - 30 < lnl + lxl || lnl != nl || memcmp(b + lho + 30, e->name, nl))
            return eng_err_set(err, ENG_FORMAT, "%s: zip entry '%s': local header does not match the directory",
                               label, nm);
        e->data_off = lho + 30 + lnl + lxl;
        if (e->csize > cd_off - e->data_off)
            return eng_err_set(err, ENG_FORMAT, "%s: zip entry '%s': %llu bytes of data run past the end of the data",
                               label, nm, (unsigned long long)e->csize);
        z->n++;
        q += 46 + nl + xl + cl;
    }
    qsort(z->e, z->n, sizeof *z->e, cmp_entry);
    for (size_t i = 1; i < z->n; i++)
        if (!cmp_entry(&z->e[i - 1], &z->e[i])) {
            char nb[160];
            return eng_err_set(err, ENG_FORMAT, "%s: zip entry '%s' appears twice", label,
                               eng__printable(z->e[i].name, z->e[i].name_len, nb, sizeof nb));
        }
    return 0;
}

void eng__zip_free(eng__zip *z) {
    free(z->e);
    z->e = NULL;
    z->n = 0;
}
