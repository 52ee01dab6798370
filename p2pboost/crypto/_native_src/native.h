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

typedef struct {
    PyObject_HEAD
    mp_size_t n;        /* limbs of the modulus */
    size_t width;       /* bytes of the modulus (= bytes of one residue on the wire) */
    mp_limb_t *m;       /* the modulus, n limbs (odd) */
    mp_limb_t minv;     /* -m^-1 mod 2^64 */
    mp_limb_t *one;     /* R mod m: 1 in Montgomery form */
    mp_limb_t *r2;      /* R^2 mod m */
    mp_limb_t *pow2;    /* POW2_TERMS entries: R^(2^i + 1) mod m, so that redc(x * it) = x R^(2^i) */
    mpz_t value;        /* the modulus as an mpz */
} ModulusObject;


extern PyTypeObject ModulusType;

/* t (2n limbs, destroyed) -> rp = t R^-1 mod m, fully reduced, constant time. */
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

/* rp = a b R^-1 mod m; scratch t holds 2n limbs, tmp n limbs. rp may alias a or b. */
static inline void mont_mul(const ModulusObject *M, mp_limb_t *rp, const mp_limb_t *a,
                            const mp_limb_t *b, mp_limb_t *t, mp_limb_t *tmp)
{
    if (a == b)
        mpn_sqr(t, a, M->n);
    else
        mpn_mul_n(t, a, b, M->n);
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
            mont_mul(M, x, x, M->pow2 + (mp_size_t)i * M->n, t, tmp);
}

ModulusObject *as_modulus(PyObject *o);

/* --- checked buffers of residues (modulus.c) --------------------------------------------- */

typedef struct {
    mp_limb_t *limbs; /* count * n limbs */
    Py_ssize_t count;
} Residues;


int load_residues(const ModulusObject *M, Py_buffer *buf, Residues *out, int allow_zero);
PyObject *new_output(const ModulusObject *M, Py_ssize_t count, unsigned char **data);
mp_limb_t *scratch(const ModulusObject *M, int extra);
int int64_buffer(PyObject *obj, Py_buffer *view, const char *name);

/* --- fixed-base tables (fixed_base.c) ---------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    ModulusObject *modulus;
    int window_bits;
    Py_ssize_t windows;
    mp_limb_t *rows; /* windows * 2^w entries of n limbs, Montgomery form */
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

#endif
