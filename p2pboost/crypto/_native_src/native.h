/*
 * The native kernel's shared declarations: limbs and bytes, the Montgomery arithmetic (inline,
 * so that every kernel's inner loop is one function), the Modulus and FixedBase types, the
 * checked buffers of residues, and the Python entry points of each file (module.c lists them).
 */
#ifndef P2PBOOST_NATIVE_H
#define P2PBOOST_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <gmp.h>
#include <stdint.h>
#include <string.h>

#include "ifma.h"

#if GMP_LIMB_BITS != 64 || GMP_NAIL_BITS != 0
#error "p2pboost's native kernel needs 64-bit limbs without nails"
#endif

#define LIMB_BYTES 8

/* --- byte <-> limb conversion ------------------------------------------------------------ */

/* Big-endian bytes p[0..w) into n little-endian limbs (w <= 8 n). */
static inline void be_to_limbs(mp_limb_t *rp, mp_size_t n, const unsigned char *p, size_t w)
{
    mp_size_t i = 0;
    size_t end = w;
    while (end >= LIMB_BYTES && i < n) {
        uint64_t v;
        memcpy(&v, p + end - LIMB_BYTES, LIMB_BYTES);
        rp[i++] = (mp_limb_t)__builtin_bswap64(v);
        end -= LIMB_BYTES;
    }
    if (i < n) {
        mp_limb_t v = 0;
        for (size_t k = 0; k < end; k++)
            v = (v << 8) | p[k];
        rp[i++] = v;
    }
    for (; i < n; i++)
        rp[i] = 0;
}

/* n limbs into w big-endian bytes (the value must fit w bytes). */
static inline void limbs_to_be(unsigned char *out, size_t w, const mp_limb_t *ap, mp_size_t n)
{
    size_t end = w;
    mp_size_t i = 0;
    while (end >= LIMB_BYTES && i < n) {
        uint64_t v = __builtin_bswap64((uint64_t)ap[i++]);
        memcpy(out + end - LIMB_BYTES, &v, LIMB_BYTES);
        end -= LIMB_BYTES;
    }
    if (end) {
        mp_limb_t v = i < n ? ap[i] : 0;
        for (size_t k = 0; k < end; k++) {
            out[end - 1 - k] = (unsigned char)(v & 0xff);
            v >>= 8;
        }
    }
}

static inline int limbs_is_zero(const mp_limb_t *ap, mp_size_t n)
{
    for (mp_size_t i = 0; i < n; i++)
        if (ap[i])
            return 0;
    return 1;
}

/* --- Montgomery arithmetic --------------------------------------------------------------- */

#define POW2_TERMS 48 /* R^(2^i) corrections up to 2^48 factors in one product */

/*
 * A modulus and the Montgomery product chosen for it at construction: GMP's mpn layer (values
 * are n 64-bit limbs, R = 2^(64 n)) or AVX-512 IFMA (ifma.c: values are `words` = 8 nz words
 * of 52-bit digits, R = 2^(52 kd), kept below 2 m between products). Every constant below is
 * in the product's own layout and for its own R, so the kernels see one arithmetic: values
 * enter with elem_load, are multiplied with mont_mul and leave with elem_store, which is where
 * the layouts differ.
 */
typedef struct {
    PyObject_HEAD
    mp_size_t n;        /* limbs of the modulus */
    mp_size_t words;    /* 64-bit words of one value in the product's layout (n for mpn) */
    size_t width;       /* bytes of the modulus (= bytes of one residue on the wire) */
    mp_limb_t *m;       /* the modulus, n limbs (odd) */
    mp_limb_t minv;     /* -m^-1 mod 2^64 */
    mp_limb_t *one;     /* R mod m: 1 in Montgomery form */
    mp_limb_t *r2;      /* R^2 mod m */
    mp_limb_t *unit;    /* 1 (plain), to leave Montgomery form with one product */
    mp_limb_t *pow2;    /* POW2_TERMS entries: R^(2^i + 1) mod m, so that redc(x * it) = x R^(2^i) */
    IfmaModulus ifma;   /* the IFMA product's constants; ifma.nz == 0 on the mpn path */
    mpz_t value;        /* the modulus as an mpz */
} ModulusObject;


extern PyTypeObject ModulusType;

/* t (2n limbs, destroyed) -> rp = t R^-1 mod m, fully reduced, constant time (mpn path). */
static inline void redc(const ModulusObject *M, mp_limb_t *rp, mp_limb_t *t, mp_limb_t *tmp)
{
    mp_size_t n = M->n;
    for (mp_size_t i = 0; i < n; i++) {
        mp_limb_t q = t[i] * M->minv;
        t[i] = mpn_addmul_1(t + i, M->m, n, q);
    }
    mp_limb_t cy = mpn_add_n(rp, t + n, t, n);
    mp_limb_t borrow = mpn_sub_n(tmp, rp, M->m, n);
    /* result >= m exactly when the addition carried or the subtraction did not borrow */
    mpn_cnd_swap((cy | (borrow ^ 1)) & 1, rp, tmp, n);
}

/* rp = a b R^-1 mod m in the product's layout; scratch t holds 2 words, tmp words. rp may
 * alias a or b. mpn: fully reduced; IFMA: below 2 m (ifma.c). */
static inline void mont_mul(const ModulusObject *M, mp_limb_t *rp, const mp_limb_t *a,
                            const mp_limb_t *b, mp_limb_t *t, mp_limb_t *tmp)
{
    if (M->ifma.nz) {
        ifma_mul(&M->ifma, rp, a, b);
        return;
    }
    if (a == b)
        mpn_sqr(t, a, M->n);
    else
        mpn_mul_n(t, a, b, M->n);
    redc(M, rp, t, tmp);
}

/* Two independent products, r0 = a0 b0 R^-1 and r1 = a1 b1 R^-1 (each r may alias its own a
 * or b, not the other pair's): interleaved on the IFMA product, where one product alone
 * leaves the vector units idle while it chooses each digit's multiple of m. */
static inline void mont_mul2(const ModulusObject *M, mp_limb_t *r0, const mp_limb_t *a0,
                             const mp_limb_t *b0, mp_limb_t *r1, const mp_limb_t *a1,
                             const mp_limb_t *b1, mp_limb_t *t, mp_limb_t *tmp)
{
    if (M->ifma.nz) {
        ifma_mul2(&M->ifma, r0, a0, b0, r1, a1, b1);
        return;
    }
    mont_mul(M, r0, a0, b0, t, tmp);
    mont_mul(M, r1, a1, b1, t, tmp);
}

/* rp = a R^-1: out of Montgomery form (t: 2 words, tmp: words of scratch). */
static inline void mont_leave(const ModulusObject *M, mp_limb_t *rp, const mp_limb_t *a,
                              mp_limb_t *t, mp_limb_t *tmp)
{
    if (M->ifma.nz) {
        ifma_mul(&M->ifma, rp, a, M->unit);
        return;
    }
    memset(t, 0, sizeof(mp_limb_t) * (size_t)(2 * M->n));
    memcpy(t, a, sizeof(mp_limb_t) * (size_t)M->n);
    redc(M, rp, t, tmp);
}

/* a b mod m for plain (not Montgomery) a, b: two Montgomery products. */
static inline void mul_plain(const ModulusObject *M, mp_limb_t *rp, const mp_limb_t *a,
                             const mp_limb_t *b, mp_limb_t *t, mp_limb_t *tmp)
{
    mont_mul(M, rp, a, b, t, tmp);
    mont_mul(M, rp, rp, M->r2, t, tmp);
}

/* x R^k for k >= 0 (x in any form), by the binary digits of k: popcount(k) products. */
static inline void times_r_power(const ModulusObject *M, mp_limb_t *x, uint64_t k, mp_limb_t *t,
                                 mp_limb_t *tmp)
{
    for (int i = 0; k && i < POW2_TERMS; i++, k >>= 1)
        if (k & 1)
            mont_mul(M, x, x, M->pow2 + (mp_size_t)i * M->words, t, tmp);
}

/* n limbs (a value below m) into the product's layout (x: `words` words). */
static inline void elem_from_limbs(const ModulusObject *M, mp_limb_t *x, const mp_limb_t *limbs)
{
    if (M->ifma.nz)
        ifma_from_limbs(&M->ifma, x, limbs, M->n);
    else if (x != limbs)
        memcpy(x, limbs, sizeof(mp_limb_t) * (size_t)M->n);
}

/* A value of the product's layout, reduced below m, as n limbs (limbs must not alias x). */
static inline void elem_to_limbs(const ModulusObject *M, mp_limb_t *limbs, const mp_limb_t *x)
{
    if (M->ifma.nz)
        ifma_to_limbs(&M->ifma, limbs, M->n, x);
    else
        memcpy(limbs, x, sizeof(mp_limb_t) * (size_t)M->n);
}

/* Big-endian bytes (the modulus' width) into x in the product's layout, with tmp (n limbs,
 * not x) as scratch; 1 when the value is in (0, m) ([0, m) with allow_zero), else 0. */
static inline int elem_load(const ModulusObject *M, mp_limb_t *x, const unsigned char *p,
                            mp_limb_t *tmp, int allow_zero)
{
    mp_limb_t *limbs = M->ifma.nz ? tmp : x;
    be_to_limbs(limbs, M->n, p, M->width);
    if ((!allow_zero && limbs_is_zero(limbs, M->n)) || mpn_cmp(limbs, M->m, M->n) >= 0)
        return 0;
    elem_from_limbs(M, x, limbs);
    return 1;
}

/* x (plain, in the product's layout) as big-endian bytes of the modulus' width, reduced
 * below m; tmp (n limbs) is scratch. */
static inline void elem_store(const ModulusObject *M, unsigned char *out, const mp_limb_t *x,
                              mp_limb_t *tmp)
{
    if (M->ifma.nz) {
        ifma_to_limbs(&M->ifma, tmp, M->n, x);
        x = tmp;
    }
    limbs_to_be(out, M->width, x, M->n);
}

ModulusObject *as_modulus(PyObject *o);

/* Whether a modulus of `bits` bits fits the IFMA product, and whether decryption modulo a
 * secret modulus of that size is faster on it than with mpz_powm_sec (modulus.c). */
int ifma_fits(size_t bits);
int ifma_for_powm(size_t bits);

/* --- checked buffers of residues (modulus.c) --------------------------------------------- */

typedef struct {
    mp_limb_t *limbs; /* count values of n limbs (load_residues) or `words` (load_elements) */
    Py_ssize_t count;
} Residues;


int load_residues(const ModulusObject *M, Py_buffer *buf, Residues *out, int allow_zero);
int load_elements(const ModulusObject *M, Py_buffer *buf, Residues *out, int allow_zero);
PyObject *new_output(const ModulusObject *M, Py_ssize_t count, unsigned char **data);
mp_limb_t *scratch(const ModulusObject *M, int extra);
int int64_buffer(PyObject *obj, Py_buffer *view, const char *name);

/* --- fixed-base tables (fixed_base.c) ---------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    ModulusObject *modulus;
    int window_bits;
    Py_ssize_t windows;
    mp_limb_t *rows; /* windows * 2^w entries of `words` words, Montgomery form */
} FixedBaseObject;

extern PyTypeObject FixedBaseType;

/* --- entry points and their docstrings --------------------------------------------------- */

#define NATIVE_ENTRY(name)                                                                     \
    extern const char name##_doc[];                                                            \
    PyObject *py_##name(PyObject *self, PyObject *args);

NATIVE_ENTRY(mul)
NATIVE_ENTRY(segment_products)
NATIVE_ENTRY(prefix_products)
NATIVE_ENTRY(divide)
NATIVE_ENTRY(horner)
NATIVE_ENTRY(fixed_base)
NATIVE_ENTRY(crt)
NATIVE_ENTRY(paillier_mask)
NATIVE_ENTRY(ou_decrypt)
NATIVE_ENTRY(paillier_decrypt)
NATIVE_ENTRY(product_kind)
NATIVE_ENTRY(ifma_supported)

#endif
