/*
 * p2pboost.crypto._native: the ciphertext hot loops in C over GMP.
 *
 * Why: a 2048-bit modular product costs about 2 us in GMP and about 0.3 us more when each one
 * is a call from the interpreter (gmpy2), so a third of the encryption and histogram work of a
 * party was spent in CPython. Here every loop runs in C over contiguous fixed-width buffers
 * (ciphertexts as the wire carries them: big-endian blocks of the modulus' width), with the
 * GIL released, so a party can also run the kernels on threads of its own process.
 *
 * Arithmetic: Montgomery multiplication on GMP's mpn layer (mpn_mul_n / mpn_sqr, a REDC with
 * mpn_addmul_1 as in GMP's own redc_1, and a constant-time final subtraction with
 * mpn_cnd_swap), which avoids the division of mpz_mul + mpz_tdiv_r; the key owner's
 * exponentiations with a secret exponent (decryption) use mpz_powm_sec.
 *
 * Trust boundary: the Python module p2pboost.crypto.kernels checks every length, width, count
 * and range before it calls in here. The checks are repeated here (cheaply) so that a wrong
 * call raises ValueError instead of reading out of bounds: buffers must be whole blocks of the
 * stated width, every ciphertext must be in (0, modulus), every index in range.
 */
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
static void be_to_limbs(mp_limb_t *rp, mp_size_t n, const unsigned char *p, size_t w)
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
static void limbs_to_be(unsigned char *out, size_t w, const mp_limb_t *ap, mp_size_t n)
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

static int limbs_is_zero(const mp_limb_t *ap, mp_size_t n)
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

static PyTypeObject ModulusType;

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

static void Modulus_dealloc(ModulusObject *self)
{
    PyMem_Free(self->m);
    PyMem_Free(self->one);
    PyMem_Free(self->r2);
    PyMem_Free(self->pow2);
    mpz_clear(self->value);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Modulus(value: bytes): an odd modulus given big-endian, at least 64 bits. */
static int Modulus_init(ModulusObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"value", NULL};
    Py_buffer buf;
    if (self->m != NULL) {
        PyErr_SetString(PyExc_TypeError, "Modulus is immutable");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*", kwlist, &buf))
        return -1;
    const unsigned char *p = buf.buf;
    size_t w = (size_t)buf.len;
    while (w && *p == 0) { /* leading zero bytes do not count */
        p++;
        w--;
    }
    if (w < 8 || w > 4096 || !(p[w - 1] & 1)) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "modulus must be odd and between 64 and 32768 bits");
        return -1;
    }
    mp_size_t n = (mp_size_t)((w + LIMB_BYTES - 1) / LIMB_BYTES);
    self->n = n;
    self->width = w;
    self->m = PyMem_Calloc((size_t)n, sizeof(mp_limb_t));
    self->one = PyMem_Calloc((size_t)n, sizeof(mp_limb_t));
    self->r2 = PyMem_Calloc((size_t)n, sizeof(mp_limb_t));
    self->pow2 = PyMem_Calloc((size_t)n * POW2_TERMS, sizeof(mp_limb_t));
    mpz_init(self->value);
    if (!self->m || !self->one || !self->r2 || !self->pow2) {
        PyBuffer_Release(&buf);
        PyErr_NoMemory();
        return -1;
    }
    be_to_limbs(self->m, n, p, w);
    PyBuffer_Release(&buf);
    mpz_import(self->value, (size_t)n, -1, sizeof(mp_limb_t), 0, 0, self->m);
    /* minv = -m^-1 mod 2^64 by Newton's iteration */
    mp_limb_t inv = 1;
    for (int i = 0; i < 7; i++)
        inv *= 2 - self->m[0] * inv;
    self->minv = (mp_limb_t)0 - inv;
    mpz_t r, x;
    mpz_init(r);
    mpz_init(x);
    mpz_setbit(r, (mp_bitcnt_t)(64 * n));
    mpz_mod(x, r, self->value);
    mpz_export(self->one, NULL, -1, sizeof(mp_limb_t), 0, 0, x);
    mpz_mul(x, x, x);
    mpz_mod(x, x, self->value);
    mpz_export(self->r2, NULL, -1, sizeof(mp_limb_t), 0, 0, x);
    mpz_clear(r);
    mpz_clear(x);
    /* pow2[0] = R^2 = R^(2^0 + 1); pow2[i+1] = redc(pow2[i]^2) = R^(2^(i+1) + 1) */
    mp_limb_t *t = PyMem_Malloc(sizeof(mp_limb_t) * (size_t)(3 * n));
    if (!t) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(self->pow2, self->r2, sizeof(mp_limb_t) * (size_t)n);
    for (int i = 1; i < POW2_TERMS; i++)
        mont_mul(self, self->pow2 + (mp_size_t)i * n, self->pow2 + (mp_size_t)(i - 1) * n,
                 self->pow2 + (mp_size_t)(i - 1) * n, t, t + 2 * n);
    PyMem_Free(t);
    return 0;
}

static PyObject *Modulus_get_width(ModulusObject *self, void *closure)
{
    return PyLong_FromSize_t(self->width);
}

static PyGetSetDef Modulus_getset[] = {
    {"width", (getter)Modulus_get_width, NULL, "bytes of one residue", NULL},
    {NULL},
};

static PyTypeObject ModulusType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "p2pboost.crypto._native.Modulus",
    .tp_doc = "An odd modulus with its Montgomery constants (immutable).",
    .tp_basicsize = sizeof(ModulusObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Modulus_init,
    .tp_dealloc = (destructor)Modulus_dealloc,
    .tp_getset = Modulus_getset,
};

static ModulusObject *as_modulus(PyObject *o)
{
    if (!PyObject_TypeCheck(o, &ModulusType) || ((ModulusObject *)o)->m == NULL) {
        PyErr_SetString(PyExc_TypeError, "expected an initialised Modulus");
        return NULL;
    }
    return (ModulusObject *)o;
}

/* --- checked buffers of residues --------------------------------------------------------- */

typedef struct {
    mp_limb_t *limbs; /* count * n limbs */
    Py_ssize_t count;
} Residues;

/* Parse a buffer of count fixed-width residues into limbs; each must be in (0, m) (or [0, m)
 * when allow_zero). Returns 0, or -1 with an exception set. Called with the GIL held. */
static int load_residues(const ModulusObject *M, Py_buffer *buf, Residues *out, int allow_zero)
{
    out->limbs = NULL;
    out->count = 0;
    if (buf->len % (Py_ssize_t)M->width) {
        PyErr_SetString(PyExc_ValueError, "buffer is not a whole number of residues");
        return -1;
    }
    Py_ssize_t count = buf->len / (Py_ssize_t)M->width;
    out->count = count;
    out->limbs = PyMem_Malloc(sizeof(mp_limb_t) * (size_t)(count ? count : 1) * (size_t)M->n);
    if (!out->limbs) {
        PyErr_NoMemory();
        return -1;
    }
    int bad = 0;
    const unsigned char *p = buf->buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        mp_limb_t *x = out->limbs + i * M->n;
        be_to_limbs(x, M->n, p + i * (Py_ssize_t)M->width, M->width);
        if ((!allow_zero && limbs_is_zero(x, M->n)) || mpn_cmp(x, M->m, M->n) >= 0) {
            bad = 1;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyMem_Free(out->limbs);
        out->limbs = NULL;
        PyErr_SetString(PyExc_ValueError, "ciphertext outside (0, modulus)");
        return -1;
    }
    return 0;
}

static PyObject *new_output(const ModulusObject *M, Py_ssize_t count, unsigned char **data)
{
    PyObject *out = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)M->width);
    if (out)
        *data = (unsigned char *)PyBytes_AS_STRING(out);
    return out;
}

static mp_limb_t *scratch(const ModulusObject *M, int extra)
{
    mp_limb_t *t = PyMem_Malloc(sizeof(mp_limb_t) * (size_t)((4 + extra) * M->n));
    if (!t)
        PyErr_NoMemory();
    return t;
}

/* Check an int64 buffer (contiguous, item size 8). */
static int int64_buffer(PyObject *obj, Py_buffer *view, const char *name)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (view->itemsize != 8 || view->format == NULL ||
        (strcmp(view->format, "q") != 0 && strcmp(view->format, "l") != 0 &&
         strcmp(view->format, "<q") != 0 && strcmp(view->format, "=q") != 0 &&
         strcmp(view->format, "<l") != 0 && strcmp(view->format, "=l") != 0)) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s must be a contiguous int64 array", name);
        return -1;
    }
    return 0;
}

/* --- kernels over ciphertexts ------------------------------------------------------------ */

PyDoc_STRVAR(mul_doc, "mul(modulus, a, b) -> bytes: a[i] * b[i] mod m for every i.");

static PyObject *py_mul(PyObject *self, PyObject *args)
{
    PyObject *mo;
    Py_buffer a, b;
    if (!PyArg_ParseTuple(args, "Oy*y*", &mo, &a, &b))
        return NULL;
    PyObject *result = NULL;
    Residues ra = {0}, rb = {0};
    mp_limb_t *t = NULL;
    ModulusObject *M = as_modulus(mo);
    if (!M)
        goto done;
    if (a.len != b.len) {
        PyErr_SetString(PyExc_ValueError, "operands differ in length");
        goto done;
    }
    if (load_residues(M, &a, &ra, 0) < 0 || load_residues(M, &b, &rb, 0) < 0)
        goto done;
    unsigned char *out;
    if (!(t = scratch(M, 1)) || !(result = new_output(M, ra.count, &out)))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    mp_size_t n = M->n;
    mp_limb_t *acc = t + 3 * n;
    for (Py_ssize_t i = 0; i < ra.count; i++) {
        mul_plain(M, acc, ra.limbs + i * n, rb.limbs + i * n, t, t + 2 * n);
        limbs_to_be(out + i * (Py_ssize_t)M->width, M->width, acc, n);
    }
    Py_END_ALLOW_THREADS
done:
    PyMem_Free(ra.limbs);
    PyMem_Free(rb.limbs);
    PyMem_Free(t);
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    return result;
}

PyDoc_STRVAR(segment_products_doc,
             "segment_products(modulus, data, index, offsets) -> bytes: for each segment s, the\n"
             "product mod m of data[index[k]] for offsets[s] <= k < offsets[s+1] (1 if empty).");

static PyObject *py_segment_products(PyObject *self, PyObject *args)
{
    PyObject *mo, *index_obj, *offsets_obj;
    Py_buffer data, index, offsets;
    if (!PyArg_ParseTuple(args, "Oy*OO", &mo, &data, &index_obj, &offsets_obj))
        return NULL;
    PyObject *result = NULL;
    mp_limb_t *t = NULL;
    int have_index = 0, have_offsets = 0;
    ModulusObject *M = as_modulus(mo);
    if (!M)
        goto done;
    if (int64_buffer(index_obj, &index, "index") < 0)
        goto done;
    have_index = 1;
    if (int64_buffer(offsets_obj, &offsets, "offsets") < 0)
        goto done;
    have_offsets = 1;
    if (data.len % (Py_ssize_t)M->width) {
        PyErr_SetString(PyExc_ValueError, "buffer is not a whole number of residues");
        goto done;
    }
    Py_ssize_t count = data.len / (Py_ssize_t)M->width;
    const int64_t *idx = index.buf, *off = offsets.buf;
    Py_ssize_t n_idx = index.len / 8, n_seg = offsets.len / 8 - 1;
    if (n_seg < 0 || off[0] != 0 || off[n_seg] != n_idx) {
        PyErr_SetString(PyExc_ValueError, "offsets must run from 0 to len(index)");
        goto done;
    }
    for (Py_ssize_t s = 0; s < n_seg; s++)
        if (off[s + 1] < off[s]) {
            PyErr_SetString(PyExc_ValueError, "offsets must not decrease");
            goto done;
        }
    for (Py_ssize_t k = 0; k < n_idx; k++)
        if (idx[k] < 0 || idx[k] >= count) {
            PyErr_SetString(PyExc_ValueError, "index out of range");
            goto done;
        }
    unsigned char *out;
    if (!(t = scratch(M, 2)) || !(result = new_output(M, n_seg, &out)))
        goto done;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    /* Only the rows the index names are read (a child's rows among a shard's), each parsed
     * and range-checked as it is used; the next few rows are prefetched, since a cell's rows
     * lie anywhere in the buffer. */
    mp_size_t n = M->n;
    size_t w = M->width;
    const unsigned char *base = data.buf;
    mp_limb_t *acc = t + 3 * n, *row = t + 4 * n;
    for (Py_ssize_t s = 0; s < n_seg && !bad; s++) {
        int64_t a = off[s], b = off[s + 1];
        memset(acc, 0, sizeof(mp_limb_t) * (size_t)n);
        acc[0] = 1;
        for (int64_t k = a; k < b; k++) {
            if (k + 4 < b) {
                const unsigned char *ahead = base + (size_t)idx[k + 4] * w;
                __builtin_prefetch(ahead);
                __builtin_prefetch(ahead + w - 1);
            }
            mp_limb_t *x = k == a ? acc : row;
            be_to_limbs(x, n, base + (size_t)idx[k] * w, w);
            if (limbs_is_zero(x, n) || mpn_cmp(x, M->m, n) >= 0) {
                bad = 1;
                break;
            }
            if (k > a)
                mont_mul(M, acc, acc, row, t, t + 2 * n);
        }
        /* acc = product * R^-(b-a-1): put the missing powers of R back */
        if (b > a)
            times_r_power(M, acc, (uint64_t)(b - a - 1), t, t + 2 * n);
        limbs_to_be(out + s * (Py_ssize_t)w, w, acc, n);
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        Py_CLEAR(result);
        PyErr_SetString(PyExc_ValueError, "ciphertext outside (0, modulus)");
    }
done:
    PyMem_Free(t);
    PyBuffer_Release(&data);
    if (have_index)
        PyBuffer_Release(&index);
    if (have_offsets)
        PyBuffer_Release(&offsets);
    return result;
}

PyDoc_STRVAR(prefix_products_doc,
             "prefix_products(modulus, data, run) -> bytes: running products mod m within each\n"
             "run of `run` consecutive residues (the cumulative sums of a histogram's bins).");

static PyObject *py_prefix_products(PyObject *self, PyObject *args)
{
    PyObject *mo;
    Py_buffer data;
    Py_ssize_t run;
    if (!PyArg_ParseTuple(args, "Oy*n", &mo, &data, &run))
        return NULL;
    PyObject *result = NULL;
    Residues rd = {0};
    mp_limb_t *t = NULL;
    ModulusObject *M = as_modulus(mo);
    if (!M)
        goto done;
    if (load_residues(M, &data, &rd, 0) < 0)
        goto done;
    if (run <= 0 || rd.count % run) {
        PyErr_SetString(PyExc_ValueError, "run must be positive and divide the count");
        goto done;
    }
    unsigned char *out;
    if (!(t = scratch(M, 1)) || !(result = new_output(M, rd.count, &out)))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    mp_size_t n = M->n;
    mp_limb_t *acc = t + 3 * n;
    for (Py_ssize_t i = 0; i < rd.count; i++) {
        if (i % run == 0)
            memcpy(acc, rd.limbs + i * n, sizeof(mp_limb_t) * (size_t)n);
        else
            mul_plain(M, acc, acc, rd.limbs + i * n, t, t + 2 * n);
        limbs_to_be(out + i * (Py_ssize_t)M->width, M->width, acc, n);
    }
    Py_END_ALLOW_THREADS
done:
    PyMem_Free(rd.limbs);
    PyMem_Free(t);
    PyBuffer_Release(&data);
    return result;
}

PyDoc_STRVAR(divide_doc,
             "divide(modulus, a, b) -> bytes: a[i] * b[i]^-1 mod m for every i, with one\n"
             "inversion for the whole batch (Montgomery's trick). ValueError if some b[i] has no\n"
             "inverse (a factor of the modulus).");

static PyObject *py_divide(PyObject *self, PyObject *args)
{
    PyObject *mo;
    Py_buffer a, b;
    if (!PyArg_ParseTuple(args, "Oy*y*", &mo, &a, &b))
        return NULL;
    PyObject *result = NULL;
    Residues ra = {0}, rb = {0};
    mp_limb_t *t = NULL, *prefix = NULL;
    ModulusObject *M = as_modulus(mo);
    if (!M)
        goto done;
    if (a.len != b.len) {
        PyErr_SetString(PyExc_ValueError, "operands differ in length");
        goto done;
    }
    if (load_residues(M, &a, &ra, 0) < 0 || load_residues(M, &b, &rb, 0) < 0)
        goto done;
    unsigned char *out;
    mp_size_t n = M->n;
    Py_ssize_t count = ra.count;
    if (!(t = scratch(M, 2)) || !(result = new_output(M, count, &out)))
        goto done;
    if (count == 0)
        goto done;
    prefix = PyMem_Malloc(sizeof(mp_limb_t) * (size_t)(count * n));
    if (!prefix) {
        Py_CLEAR(result);
        PyErr_NoMemory();
        goto done;
    }
    int singular = 0;
    Py_BEGIN_ALLOW_THREADS
    mp_limb_t *inv = t + 3 * n, *x = t + 4 * n;
    memcpy(prefix, rb.limbs, sizeof(mp_limb_t) * (size_t)n);
    for (Py_ssize_t i = 1; i < count; i++)
        mul_plain(M, prefix + i * n, prefix + (i - 1) * n, rb.limbs + i * n, t, t + 2 * n);
    mpz_t z;
    mpz_init(z);
    mpz_import(z, (size_t)n, -1, sizeof(mp_limb_t), 0, 0, prefix + (count - 1) * n);
    if (!mpz_invert(z, z, M->value)) {
        singular = 1;
    }
    else {
        memset(inv, 0, sizeof(mp_limb_t) * (size_t)n);
        mpz_export(inv, NULL, -1, sizeof(mp_limb_t), 0, 0, z);
        for (Py_ssize_t i = count - 1; i > 0; i--) {
            mul_plain(M, x, inv, prefix + (i - 1) * n, t, t + 2 * n); /* b_i^-1 */
            mul_plain(M, x, x, ra.limbs + i * n, t, t + 2 * n);
            limbs_to_be(out + i * (Py_ssize_t)M->width, M->width, x, n);
            mul_plain(M, inv, inv, rb.limbs + i * n, t, t + 2 * n);
        }
        mul_plain(M, x, inv, ra.limbs, t, t + 2 * n);
        limbs_to_be(out, M->width, x, n);
    }
    mpz_clear(z);
    Py_END_ALLOW_THREADS
    if (singular) {
        Py_CLEAR(result);
        PyErr_SetString(PyExc_ValueError, "a divisor has no inverse modulo the modulus");
    }
done:
    PyMem_Free(ra.limbs);
    PyMem_Free(rb.limbs);
    PyMem_Free(prefix);
    PyMem_Free(t);
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    return result;
}

PyDoc_STRVAR(horner_doc,
             "horner(modulus, data, shifts, offsets) -> bytes: per group g, acc = data[first];\n"
             "then acc = acc^(2^shifts[k]) * data[k] mod m for the group's other residues (the\n"
             "cipher compression of SecureBoost+: shift, then add). shifts[first] is ignored.");

static PyObject *py_horner(PyObject *self, PyObject *args)
{
    PyObject *mo, *shifts_obj, *offsets_obj;
    Py_buffer data, shifts, offsets;
    if (!PyArg_ParseTuple(args, "Oy*OO", &mo, &data, &shifts_obj, &offsets_obj))
        return NULL;
    PyObject *result = NULL;
    Residues rd = {0};
    mp_limb_t *t = NULL;
    int have_shifts = 0, have_offsets = 0;
    ModulusObject *M = as_modulus(mo);
    if (!M)
        goto done;
    if (int64_buffer(shifts_obj, &shifts, "shifts") < 0)
        goto done;
    have_shifts = 1;
    if (int64_buffer(offsets_obj, &offsets, "offsets") < 0)
        goto done;
    have_offsets = 1;
    if (load_residues(M, &data, &rd, 0) < 0)
        goto done;
    const int64_t *sh = shifts.buf, *off = offsets.buf;
    Py_ssize_t n_groups = offsets.len / 8 - 1;
    if (shifts.len / 8 != rd.count) {
        PyErr_SetString(PyExc_ValueError, "need one shift per residue");
        goto done;
    }
    if (n_groups < 0 || off[0] != 0 || off[n_groups] != rd.count) {
        PyErr_SetString(PyExc_ValueError, "offsets must run from 0 to the count");
        goto done;
    }
    for (Py_ssize_t g = 0; g < n_groups; g++)
        if (off[g + 1] <= off[g]) {
            PyErr_SetString(PyExc_ValueError, "every group needs at least one residue");
            goto done;
        }
    for (Py_ssize_t k = 0; k < rd.count; k++)
        if (sh[k] < 0 || sh[k] > 65536) {
            PyErr_SetString(PyExc_ValueError, "shifts must be in [0, 65536]");
            goto done;
        }
    unsigned char *out;
    if (!(t = scratch(M, 1)) || !(result = new_output(M, n_groups, &out)))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    mp_size_t n = M->n;
    mp_limb_t *acc = t + 3 * n;
    for (Py_ssize_t g = 0; g < n_groups; g++) {
        memcpy(acc, rd.limbs + off[g] * n, sizeof(mp_limb_t) * (size_t)n);
        for (int64_t k = off[g] + 1; k < off[g + 1]; k++) {
            mont_mul(M, acc, acc, M->r2, t, t + 2 * n); /* to Montgomery form */
            for (int64_t s = 0; s < sh[k]; s++)
                mont_mul(M, acc, acc, acc, t, t + 2 * n); /* squarings stay in that form */
            mont_mul(M, acc, acc, rd.limbs + k * n, t, t + 2 * n); /* and leave it */
        }
        limbs_to_be(out + g * (Py_ssize_t)M->width, M->width, acc, n);
    }
    Py_END_ALLOW_THREADS
done:
    PyMem_Free(rd.limbs);
    PyMem_Free(t);
    PyBuffer_Release(&data);
    if (have_shifts)
        PyBuffer_Release(&shifts);
    if (have_offsets)
        PyBuffer_Release(&offsets);
    return result;
}

/* --- fixed-base tables ------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    ModulusObject *modulus;
    int window_bits;
    Py_ssize_t windows;
    mp_limb_t *rows; /* windows * 2^w entries of n limbs, Montgomery form */
} FixedBaseObject;

static PyTypeObject FixedBaseType;

static void FixedBase_dealloc(FixedBaseObject *self)
{
    PyMem_Free(self->rows);
    Py_XDECREF(self->modulus);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* FixedBase(modulus, base: bytes, window_bits, windows): rows[j][d] = base^(d 2^(w j)). */
static int FixedBase_init(FixedBaseObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"modulus", "base", "window_bits", "windows", NULL};
    PyObject *mo;
    Py_buffer base;
    int w;
    Py_ssize_t windows;
    if (self->rows != NULL) {
        PyErr_SetString(PyExc_TypeError, "FixedBase is immutable");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Oy*in", kwlist, &mo, &base, &w, &windows))
        return -1;
    ModulusObject *M = as_modulus(mo);
    Residues rb = {0};
    int rc = -1;
    mp_limb_t *t = NULL;
    if (!M)
        goto done;
    if (w < 1 || w > 16 || windows < 1 || windows > 65536) {
        PyErr_SetString(PyExc_ValueError, "window_bits must be in [1, 16], windows in [1, 65536]");
        goto done;
    }
    if ((size_t)base.len != M->width) {
        PyErr_SetString(PyExc_ValueError, "base must have the modulus' width");
        goto done;
    }
    if (load_residues(M, &base, &rb, 0) < 0)
        goto done;
    mp_size_t n = M->n;
    size_t entries = (size_t)windows << w;
    if (entries > ((size_t)1 << 34) / ((size_t)n * sizeof(mp_limb_t))) {
        PyErr_SetString(PyExc_MemoryError, "fixed-base table larger than 16 GiB");
        goto done;
    }
    self->rows = PyMem_Malloc(entries * (size_t)n * sizeof(mp_limb_t));
    if (!self->rows || !(t = scratch(M, 1))) {
        PyErr_NoMemory();
        goto done;
    }
    Py_INCREF(M);
    self->modulus = M;
    self->window_bits = w;
    self->windows = windows;
    Py_BEGIN_ALLOW_THREADS
    mp_limb_t *b = t + 3 * n;
    mont_mul(M, b, rb.limbs, M->r2, t, t + 2 * n); /* base in Montgomery form */
    size_t size = (size_t)1 << w;
    for (Py_ssize_t j = 0; j < windows; j++) {
        mp_limb_t *row = self->rows + (size_t)j * size * (size_t)n;
        memcpy(row, M->one, sizeof(mp_limb_t) * (size_t)n);
        for (size_t d = 1; d < size; d++)
            mont_mul(M, row + d * (size_t)n, row + (d - 1) * (size_t)n, b, t, t + 2 * n);
        /* next window's base: base^(2^w) = row[size-1] * base */
        mont_mul(M, b, row + (size - 1) * (size_t)n, b, t, t + 2 * n);
    }
    Py_END_ALLOW_THREADS
    rc = 0;
done:
    PyMem_Free(rb.limbs);
    PyMem_Free(t);
    PyBuffer_Release(&base);
    return rc;
}

static PyObject *FixedBase_get_windows(FixedBaseObject *self, void *closure)
{
    return PyLong_FromSsize_t(self->windows);
}

static PyObject *FixedBase_get_window_bits(FixedBaseObject *self, void *closure)
{
    return PyLong_FromLong(self->window_bits);
}

static PyObject *FixedBase_get_modulus(FixedBaseObject *self, void *closure)
{
    PyObject *m = self->modulus ? (PyObject *)self->modulus : Py_None;
    Py_INCREF(m);
    return m;
}

static PyGetSetDef FixedBase_getset[] = {
    {"windows", (getter)FixedBase_get_windows, NULL, "windows of the table", NULL},
    {"window_bits", (getter)FixedBase_get_window_bits, NULL, "bits per window", NULL},
    {"modulus", (getter)FixedBase_get_modulus, NULL, "the table's Modulus", NULL},
    {NULL},
};

static PyTypeObject FixedBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "p2pboost.crypto._native.FixedBase",
    .tp_doc = "Fixed-base exponentiation rows of one base modulo one Modulus (immutable).",
    .tp_basicsize = sizeof(FixedBaseObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)FixedBase_init,
    .tp_dealloc = (destructor)FixedBase_dealloc,
    .tp_getset = FixedBase_getset,
};

/* Digit j (w bits, little-endian) of a little-endian exponent of ebytes bytes. */
static inline unsigned digit_at(const unsigned char *e, size_t ebytes, size_t bit, int w)
{
    unsigned v = 0;
    for (int k = 0; k < 3; k++) { /* w <= 16 spans at most 3 bytes */
        size_t byte = bit / 8 + (size_t)k;
        if (byte < ebytes)
            v |= (unsigned)e[byte] << (8 * k);
    }
    return (v >> (bit % 8)) & ((1u << w) - 1);
}

#define MAX_TABLES 4
#define FB_BLOCK 64 /* values per pass over a window's row */

PyDoc_STRVAR(fixed_base_doc,
             "fixed_base(tables, exponents, count) -> bytes: for each i < count, the product mod m\n"
             "of tables[k]^exponents[k][i] over k (tables share one Modulus; exponents[k] holds\n"
             "count little-endian exponents of equal width, each below 2^(w * windows) of its\n"
             "table). The fixed-base encryption kernel: one table product per window.");

static PyObject *py_fixed_base(PyObject *self, PyObject *args)
{
    PyObject *tables, *exps;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "O!O!n", &PyTuple_Type, &tables, &PyTuple_Type, &exps, &count))
        return NULL;
    Py_ssize_t k_tables = PyTuple_GET_SIZE(tables);
    if (k_tables < 1 || k_tables > MAX_TABLES || PyTuple_GET_SIZE(exps) != k_tables) {
        PyErr_SetString(PyExc_ValueError, "need 1 to 4 tables, one exponent buffer each");
        return NULL;
    }
    if (count < 0) {
        PyErr_SetString(PyExc_ValueError, "count must be >= 0");
        return NULL;
    }
    FixedBaseObject *tab[MAX_TABLES];
    Py_buffer ebuf[MAX_TABLES];
    size_t ebytes[MAX_TABLES];
    Py_ssize_t got = 0;
    PyObject *result = NULL;
    mp_limb_t *t = NULL;
    ModulusObject *M = NULL;
    for (Py_ssize_t k = 0; k < k_tables; k++) {
        PyObject *o = PyTuple_GET_ITEM(tables, k);
        if (!PyObject_TypeCheck(o, &FixedBaseType) || ((FixedBaseObject *)o)->rows == NULL) {
            PyErr_SetString(PyExc_TypeError, "tables must be initialised FixedBase objects");
            goto done;
        }
        tab[k] = (FixedBaseObject *)o;
        if (M == NULL)
            M = tab[k]->modulus;
        else if (tab[k]->modulus != M) {
            PyErr_SetString(PyExc_ValueError, "tables must share one Modulus");
            goto done;
        }
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(exps, k), &ebuf[k], PyBUF_SIMPLE) < 0)
            goto done;
        got = k + 1;
        if (count == 0 ? ebuf[k].len != 0 : ebuf[k].len % count != 0) {
            PyErr_SetString(PyExc_ValueError, "exponent buffer is not count equal widths");
            goto done;
        }
        ebytes[k] = count ? (size_t)(ebuf[k].len / count) : 0;
        /* exponents must fit the table: bits above w * windows must be zero */
        size_t bits = (size_t)tab[k]->window_bits * (size_t)tab[k]->windows;
        const unsigned char *e = ebuf[k].buf;
        for (Py_ssize_t i = 0; i < count; i++)
            for (size_t byte = bits / 8; byte < ebytes[k]; byte++) {
                unsigned char v = e[(size_t)i * ebytes[k] + byte];
                if (byte == bits / 8)
                    v = (unsigned char)(v >> (bits % 8));
                if (v) {
                    PyErr_SetString(PyExc_ValueError, "exponent longer than its table");
                    goto done;
                }
            }
    }
    unsigned char *out;
    mp_size_t n = M->n;
    mp_limb_t *accs = NULL;
    if (!(t = scratch(M, 1)) || !(result = new_output(M, count, &out)))
        goto done;
    accs = PyMem_Malloc(sizeof(mp_limb_t) * (size_t)(FB_BLOCK * n));
    if (!accs) {
        Py_CLEAR(result);
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    /* Window by window over a block of values, so that one window's row of the table (up to
     * 2^w entries) stays in cache while the block's accumulators (a few KiB) take from it;
     * value by value, every lookup would touch another row of a table of tens of MiB. */
    for (Py_ssize_t i0 = 0; i0 < count; i0 += FB_BLOCK) {
        Py_ssize_t block = count - i0 < FB_BLOCK ? count - i0 : FB_BLOCK;
        int first = 1;
        for (Py_ssize_t k = 0; k < k_tables; k++) {
            FixedBaseObject *T = tab[k];
            int w = T->window_bits;
            size_t size = (size_t)1 << w;
            Py_ssize_t used = (Py_ssize_t)((ebytes[k] * 8 + (size_t)w - 1) / (size_t)w);
            if (used > T->windows)
                used = T->windows;
            for (Py_ssize_t j = 0; j < used; j++) {
                const mp_limb_t *row = T->rows + (size_t)j * size * (size_t)n;
                for (Py_ssize_t b = 0; b < block; b++) {
                    const unsigned char *e =
                        (const unsigned char *)ebuf[k].buf + (size_t)(i0 + b) * ebytes[k];
                    unsigned d = digit_at(e, ebytes[k], (size_t)j * (size_t)w, w);
                    mp_limb_t *acc = accs + b * n;
                    if (first)
                        memcpy(acc, row + d * (size_t)n, sizeof(mp_limb_t) * (size_t)n);
                    else
                        mont_mul(M, acc, acc, row + d * (size_t)n, t, t + 2 * n);
                }
                first = 0;
            }
        }
        for (Py_ssize_t b = 0; b < block; b++) {
            mp_limb_t *acc = accs + b * n;
            if (first) /* no window at all: the empty product, 1 (R in Montgomery form) */
                memcpy(acc, M->one, sizeof(mp_limb_t) * (size_t)n);
            /* leave Montgomery form: redc(acc * 1) */
            memset(t, 0, sizeof(mp_limb_t) * (size_t)(2 * n));
            memcpy(t, acc, sizeof(mp_limb_t) * (size_t)n);
            redc(M, acc, t, t + 2 * n);
            limbs_to_be(out + (i0 + b) * (Py_ssize_t)M->width, M->width, acc, n);
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(accs);
done:
    for (Py_ssize_t k = 0; k < got; k++)
        PyBuffer_Release(&ebuf[k]);
    PyMem_Free(t);
    return result;
}

/* --- key owner: CRT and decryption ------------------------------------------------------- */

static void mpz_from_be(mpz_t z, const unsigned char *p, size_t w)
{
    mpz_import(z, w, 1, 1, 1, 0, p);
}

static void mpz_to_be(unsigned char *out, size_t w, const mpz_t z)
{
    size_t used = (mpz_sizeinbase(z, 2) + 7) / 8;
    memset(out, 0, w);
    if (mpz_sgn(z))
        mpz_export(out + (w - used), NULL, 1, 1, 1, 0, z);
}

static int parse_mpz(PyObject *bytes_obj, mpz_t z, const char *name)
{
    Py_buffer b;
    if (PyObject_GetBuffer(bytes_obj, &b, PyBUF_SIMPLE) < 0)
        return -1;
    mpz_from_be(z, b.buf, (size_t)b.len);
    PyBuffer_Release(&b);
    if (mpz_sgn(z) <= 0) {
        PyErr_Format(PyExc_ValueError, "%s must be positive", name);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(crt_doc,
             "crt(a, b, m1: Modulus, m2: Modulus, m1_inverse: bytes, width) -> bytes: the x below\n"
             "m1 m2 with x = a[i] mod m1 and x = b[i] mod m2, big-endian of `width` bytes each.");

static PyObject *py_crt(PyObject *self, PyObject *args)
{
    Py_buffer a, b;
    PyObject *mo1, *mo2, *inv_obj;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "y*y*OOOn", &a, &b, &mo1, &mo2, &inv_obj, &width))
        return NULL;
    PyObject *result = NULL;
    mpz_t inv, x, y, prod;
    mpz_inits(inv, x, y, prod, NULL);
    ModulusObject *M1 = as_modulus(mo1), *M2 = M1 ? as_modulus(mo2) : NULL;
    if (!M2 || parse_mpz(inv_obj, inv, "m1_inverse") < 0)
        goto done;
    Py_ssize_t count = a.len / (Py_ssize_t)M1->width;
    if (a.len % (Py_ssize_t)M1->width || b.len != count * (Py_ssize_t)M2->width) {
        PyErr_SetString(PyExc_ValueError, "residue buffers do not match their moduli");
        goto done;
    }
    mpz_mul(prod, M1->value, M2->value);
    if (width <= 0 || (size_t)width < (mpz_sizeinbase(prod, 2) + 7) / 8) {
        PyErr_SetString(PyExc_ValueError, "width too small for m1 * m2");
        goto done;
    }
    unsigned char *out;
    result = PyBytes_FromStringAndSize(NULL, count * width);
    if (!result)
        goto done;
    out = (unsigned char *)PyBytes_AS_STRING(result);
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count && !bad; i++) {
        mpz_from_be(x, (const unsigned char *)a.buf + i * (Py_ssize_t)M1->width, M1->width);
        mpz_from_be(y, (const unsigned char *)b.buf + i * (Py_ssize_t)M2->width, M2->width);
        if (mpz_cmp(x, M1->value) >= 0 || mpz_cmp(y, M2->value) >= 0) {
            bad = 1;
            break;
        }
        mpz_sub(y, y, x);
        mpz_mul(y, y, inv);
        mpz_mod(y, y, M2->value);
        mpz_addmul(x, y, M1->value);
        mpz_to_be(out + i * width, (size_t)width, x);
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        Py_CLEAR(result);
        PyErr_SetString(PyExc_ValueError, "residue not below its modulus");
    }
done:
    mpz_clears(inv, x, y, prod, NULL);
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    return result;
}

PyDoc_STRVAR(paillier_mask_doc,
             "paillier_mask(n2: Modulus, n: bytes, plaintexts, pwidth, factors) -> bytes:\n"
             "(1 + m n) f mod n^2 = f + n (m f mod n) for each big-endian plaintext m (pwidth\n"
             "bytes, below n) and randomiser f (in (0, n^2)).");

static PyObject *py_paillier_mask(PyObject *self, PyObject *args)
{
    PyObject *mo, *n_obj;
    Py_buffer plain, factors;
    Py_ssize_t pwidth;
    if (!PyArg_ParseTuple(args, "OOy*ny*", &mo, &n_obj, &plain, &pwidth, &factors))
        return NULL;
    PyObject *result = NULL;
    Residues rf = {0};
    mpz_t n, m, f, x;
    mpz_inits(n, m, f, x, NULL);
    ModulusObject *M = as_modulus(mo);
    if (!M || parse_mpz(n_obj, n, "n") < 0)
        goto done;
    mpz_mul(x, n, n);
    if (mpz_cmp(x, M->value) != 0) {
        PyErr_SetString(PyExc_ValueError, "the modulus is not n^2");
        goto done;
    }
    if (pwidth <= 0 || plain.len % pwidth) {
        PyErr_SetString(PyExc_ValueError, "plaintexts are not whole blocks of pwidth bytes");
        goto done;
    }
    if (load_residues(M, &factors, &rf, 0) < 0)
        goto done;
    Py_ssize_t count = plain.len / pwidth;
    if (rf.count != count) {
        PyErr_SetString(PyExc_ValueError, "need one factor per plaintext");
        goto done;
    }
    unsigned char *out;
    if (!(result = new_output(M, count, &out)))
        goto done;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        mpz_from_be(m, (const unsigned char *)plain.buf + i * pwidth, (size_t)pwidth);
        if (mpz_cmp(m, n) >= 0) {
            bad = 1;
            break;
        }
        mpz_import(f, (size_t)M->n, -1, sizeof(mp_limb_t), 0, 0, rf.limbs + i * M->n);
        mpz_mul(x, m, f);
        mpz_mod(x, x, n);
        mpz_addmul(f, x, n); /* f + n (m f mod n) < n^2 + n (n - 1) */
        mpz_mod(f, f, M->value);
        mpz_to_be(out + i * (Py_ssize_t)M->width, M->width, f);
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        Py_CLEAR(result);
        PyErr_SetString(PyExc_ValueError, "plaintext outside [0, n)");
    }
done:
    PyMem_Free(rf.limbs);
    mpz_clears(n, m, f, x, NULL);
    PyBuffer_Release(&plain);
    PyBuffer_Release(&factors);
    return result;
}

PyDoc_STRVAR(ou_decrypt_doc,
             "ou_decrypt(n: Modulus, data, p, p2, exponent, gp_inverse, pwidth) -> bytes: for\n"
             "each ciphertext c in (0, n), m = L(c^exponent mod p^2) gp_inverse mod p with\n"
             "L(x) = (x - 1) / p, big-endian of pwidth bytes. The exponent is secret:\n"
             "mpz_powm_sec.");

static PyObject *py_ou_decrypt(PyObject *self, PyObject *args)
{
    PyObject *mo, *p_obj, *p2_obj, *e_obj, *inv_obj;
    Py_buffer data;
    Py_ssize_t pwidth;
    if (!PyArg_ParseTuple(args, "Oy*OOOOn", &mo, &data, &p_obj, &p2_obj, &e_obj, &inv_obj,
                          &pwidth))
        return NULL;
    PyObject *result = NULL;
    Residues rc = {0};
    mpz_t p, p2, e, inv, c;
    mpz_inits(p, p2, e, inv, c, NULL);
    ModulusObject *M = as_modulus(mo);
    if (!M || parse_mpz(p_obj, p, "p") < 0 || parse_mpz(p2_obj, p2, "p2") < 0 ||
        parse_mpz(e_obj, e, "exponent") < 0 || parse_mpz(inv_obj, inv, "gp_inverse") < 0)
        goto done;
    if (mpz_even_p(p2) || pwidth <= 0 || (size_t)pwidth < (mpz_sizeinbase(p, 2) + 7) / 8) {
        PyErr_SetString(PyExc_ValueError, "bad decryption constants");
        goto done;
    }
    if (load_residues(M, &data, &rc, 0) < 0)
        goto done;
    unsigned char *out;
    result = PyBytes_FromStringAndSize(NULL, rc.count * pwidth);
    if (!result)
        goto done;
    out = (unsigned char *)PyBytes_AS_STRING(result);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < rc.count; i++) {
        mpz_import(c, (size_t)M->n, -1, sizeof(mp_limb_t), 0, 0, rc.limbs + i * M->n);
        mpz_mod(c, c, p2);
        mpz_powm_sec(c, c, e, p2);
        mpz_sub_ui(c, c, 1);
        mpz_tdiv_q(c, c, p);
        mpz_mul(c, c, inv);
        mpz_mod(c, c, p);
        mpz_to_be(out + i * pwidth, (size_t)pwidth, c);
    }
    Py_END_ALLOW_THREADS
done:
    PyMem_Free(rc.limbs);
    mpz_clears(p, p2, e, inv, c, NULL);
    PyBuffer_Release(&data);
    return result;
}

PyDoc_STRVAR(paillier_decrypt_doc,
             "paillier_decrypt(n2: Modulus, data, p, q, p2, q2, hp, hq, p_inverse, pwidth) ->\n"
             "bytes: CRT decryption of each ciphertext in (0, n^2) to its plaintext in [0, n),\n"
             "big-endian of pwidth bytes; exponents p - 1 and q - 1 with mpz_powm_sec.");

static PyObject *py_paillier_decrypt(PyObject *self, PyObject *args)
{
    PyObject *mo, *objs[7];
    Py_buffer data;
    Py_ssize_t pwidth;
    if (!PyArg_ParseTuple(args, "Oy*OOOOOOOn", &mo, &data, &objs[0], &objs[1], &objs[2],
                          &objs[3], &objs[4], &objs[5], &objs[6], &pwidth))
        return NULL;
    static const char *names[7] = {"p", "q", "p2", "q2", "hp", "hq", "p_inverse"};
    PyObject *result = NULL;
    Residues rc = {0};
    mpz_t k[7], c, mp, mq, ep, eq, n;
    for (int i = 0; i < 7; i++)
        mpz_init(k[i]);
    mpz_inits(c, mp, mq, ep, eq, n, NULL);
    ModulusObject *M = as_modulus(mo);
    if (!M)
        goto done;
    for (int i = 0; i < 7; i++)
        if (parse_mpz(objs[i], k[i], names[i]) < 0)
            goto done;
    mpz_mul(n, k[0], k[1]);
    if (mpz_even_p(k[2]) || mpz_even_p(k[3]) || pwidth <= 0 ||
        (size_t)pwidth < (mpz_sizeinbase(n, 2) + 7) / 8) {
        PyErr_SetString(PyExc_ValueError, "bad decryption constants");
        goto done;
    }
    mpz_sub_ui(ep, k[0], 1);
    mpz_sub_ui(eq, k[1], 1);
    if (load_residues(M, &data, &rc, 0) < 0)
        goto done;
    unsigned char *out;
    result = PyBytes_FromStringAndSize(NULL, rc.count * pwidth);
    if (!result)
        goto done;
    out = (unsigned char *)PyBytes_AS_STRING(result);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < rc.count; i++) {
        mpz_import(c, (size_t)M->n, -1, sizeof(mp_limb_t), 0, 0, rc.limbs + i * M->n);
        mpz_mod(mp, c, k[2]);
        mpz_powm_sec(mp, mp, ep, k[2]);
        mpz_sub_ui(mp, mp, 1);
        mpz_tdiv_q(mp, mp, k[0]);
        mpz_mul(mp, mp, k[4]);
        mpz_mod(mp, mp, k[0]);
        mpz_mod(mq, c, k[3]);
        mpz_powm_sec(mq, mq, eq, k[3]);
        mpz_sub_ui(mq, mq, 1);
        mpz_tdiv_q(mq, mq, k[1]);
        mpz_mul(mq, mq, k[5]);
        mpz_mod(mq, mq, k[1]);
        mpz_sub(mq, mq, mp);
        mpz_mul(mq, mq, k[6]);
        mpz_mod(mq, mq, k[1]);
        mpz_addmul(mp, mq, k[0]);
        mpz_to_be(out + i * pwidth, (size_t)pwidth, mp);
    }
    Py_END_ALLOW_THREADS
done:
    PyMem_Free(rc.limbs);
    for (int i = 0; i < 7; i++)
        mpz_clear(k[i]);
    mpz_clears(c, mp, mq, ep, eq, n, NULL);
    PyBuffer_Release(&data);
    return result;
}

/* --- module ------------------------------------------------------------------------------ */

static PyMethodDef native_methods[] = {
    {"mul", py_mul, METH_VARARGS, mul_doc},
    {"segment_products", py_segment_products, METH_VARARGS, segment_products_doc},
    {"prefix_products", py_prefix_products, METH_VARARGS, prefix_products_doc},
    {"divide", py_divide, METH_VARARGS, divide_doc},
    {"horner", py_horner, METH_VARARGS, horner_doc},
    {"fixed_base", py_fixed_base, METH_VARARGS, fixed_base_doc},
    {"crt", py_crt, METH_VARARGS, crt_doc},
    {"paillier_mask", py_paillier_mask, METH_VARARGS, paillier_mask_doc},
    {"ou_decrypt", py_ou_decrypt, METH_VARARGS, ou_decrypt_doc},
    {"paillier_decrypt", py_paillier_decrypt, METH_VARARGS, paillier_decrypt_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    "p2pboost.crypto._native",
    "The ciphertext hot loops in C over GMP (see p2pboost.crypto.kernels).",
    -1,
    native_methods,
};

PyMODINIT_FUNC PyInit__native(void)
{
    if (PyType_Ready(&ModulusType) < 0 || PyType_Ready(&FixedBaseType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&native_module);
    if (!m)
        return NULL;
    Py_INCREF(&ModulusType);
    Py_INCREF(&FixedBaseType);
    if (PyModule_AddObject(m, "Modulus", (PyObject *)&ModulusType) < 0 ||
        PyModule_AddObject(m, "FixedBase", (PyObject *)&FixedBaseType) < 0 ||
        PyModule_AddStringConstant(m, "gmp_version", gmp_version) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
