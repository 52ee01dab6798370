/* The Modulus type (an odd modulus with its Montgomery product and that product's constants)
 * and the checked buffers of residues every kernel reads: whole blocks of the modulus' width,
 * each value in (0, m). */
#include "native.h"

/* The smallest modulus the IFMA product takes by default. Measured on an AMD EPYC (Zen 4),
 * 2026-11-27, one Montgomery product, mpn against IFMA: 128 bits 0.020 / 0.027 us, 192 bits
 * 0.032 / 0.032, 256 bits 0.045 / 0.036, 512 bits 0.11 / 0.072, 1024 bits 0.34 / 0.14, 2048
 * bits 1.23 / 0.33, 4096 bits 4.49 / 1.15. */
#define IFMA_MIN_BITS 256
/* The smallest secret modulus (p^2, q^2) decryption exponentiates on the IFMA product: a
 * 224-bit exponent took 9.8 us with mpz_powm_sec and 11.8 us on IFMA at 256 bits, 30 and 22
 * us at 512 bits, 100 and 45 us at 1024 bits. */
#define IFMA_POWM_MIN_BITS 500

static const char *product_name(const ModulusObject *M)
{
    return M->ifma.nz ? "ifma" : "mpn";
}

/* Which product a modulus of `bits` bits gets when none is asked for: IFMA where this CPU has
 * it (and P2PBOOST_IFMA does not switch it off), the size is one it is faster at, and it fits
 * IFMA_MAX_VECTORS. */
static int ifma_by_default(size_t bits)
{
    return ifma_usable() && bits >= IFMA_MIN_BITS && ifma_fits(bits);
}

int ifma_fits(size_t bits)
{
    return bits + 2 <= 52 * 8 * IFMA_MAX_VECTORS;
}

int ifma_for_powm(size_t bits)
{
    return bits >= IFMA_POWM_MIN_BITS && ifma_fits(bits);
}

static void Modulus_dealloc(ModulusObject *self)
{
    PyMem_Free(self->m);
    PyMem_Free(self->one);
    PyMem_Free(self->r2);
    PyMem_Free(self->unit);
    PyMem_Free(self->pow2);
    ifma_clear(&self->ifma);
    mpz_clear(self->value);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The product's constants: one = R mod m, r2 = R^2 mod m and the pow2 table, in the product's
 * layout, for R = 2^bits_of_r (64 n for mpn, 52 kd for IFMA). 0, or -1 with MemoryError. */
static int Modulus_constants(ModulusObject *self, mp_bitcnt_t bits_of_r)
{
    mp_size_t n = self->n, words = self->words;
    self->one = PyMem_Calloc((size_t)words, sizeof(mp_limb_t));
    self->r2 = PyMem_Calloc((size_t)words, sizeof(mp_limb_t));
    self->unit = PyMem_Calloc((size_t)words, sizeof(mp_limb_t));
    self->pow2 = PyMem_Calloc((size_t)words * POW2_TERMS, sizeof(mp_limb_t));
    mp_limb_t *t = PyMem_Calloc((size_t)(3 * words + n), sizeof(mp_limb_t));
    if (!self->one || !self->r2 || !self->unit || !self->pow2 || !t) {
        PyMem_Free(t);
        PyErr_NoMemory();
        return -1;
    }
    self->unit[0] = 1; /* 1 is a one in the lowest word in either layout */
    mp_limb_t *limbs = t + 3 * words;
    mpz_t r, x;
    mpz_init(r);
    mpz_init(x);
    mpz_setbit(r, bits_of_r);
    mpz_mod(x, r, self->value);
    memset(limbs, 0, sizeof(mp_limb_t) * (size_t)n);
    mpz_export(limbs, NULL, -1, sizeof(mp_limb_t), 0, 0, x);
    elem_from_limbs(self, self->one, limbs);
    mpz_mul(x, x, x);
    mpz_mod(x, x, self->value);
    memset(limbs, 0, sizeof(mp_limb_t) * (size_t)n);
    mpz_export(limbs, NULL, -1, sizeof(mp_limb_t), 0, 0, x);
    elem_from_limbs(self, self->r2, limbs);
    mpz_clear(r);
    mpz_clear(x);
    /* pow2[0] = R^2 = R^(2^0 + 1); pow2[i+1] = redc(pow2[i]^2) = R^(2^(i+1) + 1) */
    memcpy(self->pow2, self->r2, sizeof(mp_limb_t) * (size_t)words);
    for (int i = 1; i < POW2_TERMS; i++)
        mont_mul(self, self->pow2 + (mp_size_t)i * words, self->pow2 + (mp_size_t)(i - 1) * words,
                 self->pow2 + (mp_size_t)(i - 1) * words, t, t + 2 * words);
    PyMem_Free(t);
    return 0;
}

/* Modulus(value: bytes, product="auto"): an odd modulus given big-endian, at least 64 bits.
 * product: "mpn", "ifma" (ValueError where this CPU lacks AVX-512 IFMA or the size is out of
 * its range) or "auto" (IFMA where available and measured faster; see ifma_by_default). */
static int Modulus_init(ModulusObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"value", "product", NULL};
    Py_buffer buf;
    const char *product = "auto";
    if (self->m != NULL) {
        PyErr_SetString(PyExc_TypeError, "Modulus is immutable");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*|s", kwlist, &buf, &product))
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
    size_t bits = 8 * w - (size_t)__builtin_clz((unsigned)p[0]) + 24;
    int use_ifma;
    if (strcmp(product, "auto") == 0)
        use_ifma = ifma_by_default(bits);
    else if (strcmp(product, "mpn") == 0)
        use_ifma = 0;
    else if (strcmp(product, "ifma") == 0) {
        if (!ifma_supported() || !ifma_fits(bits)) {
            PyBuffer_Release(&buf);
            PyErr_SetString(PyExc_ValueError, ifma_supported()
                                                  ? "modulus too large for the IFMA product"
                                                  : "this CPU has no AVX-512 IFMA");
            return -1;
        }
        use_ifma = 1;
    }
    else {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "product must be 'auto', 'mpn' or 'ifma'");
        return -1;
    }
    mp_size_t n = (mp_size_t)((w + LIMB_BYTES - 1) / LIMB_BYTES);
    self->n = n;
    self->words = n;
    self->width = w;
    self->m = PyMem_Calloc((size_t)n, sizeof(mp_limb_t));
    mpz_init(self->value);
    if (!self->m) {
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
    mp_bitcnt_t bits_of_r = (mp_bitcnt_t)(64 * n);
    if (use_ifma) {
        if (ifma_setup(&self->ifma, self->m, n) < 0) {
            PyErr_NoMemory();
            return -1;
        }
        self->words = 8 * (mp_size_t)self->ifma.nz;
        bits_of_r = (mp_bitcnt_t)(52 * self->ifma.kd);
    }
    return Modulus_constants(self, bits_of_r);
}

static PyObject *Modulus_get_width(ModulusObject *self, void *closure)
{
    return PyLong_FromSize_t(self->width);
}

static PyObject *Modulus_get_product(ModulusObject *self, void *closure)
{
    return PyUnicode_FromString(product_name(self));
}

static PyGetSetDef Modulus_getset[] = {
    {"width", (getter)Modulus_get_width, NULL, "bytes of one residue", NULL},
    {"product", (getter)Modulus_get_product, NULL, "the Montgomery product: 'ifma' or 'mpn'",
     NULL},
    {NULL},
};

PyTypeObject ModulusType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "p2pboost.crypto._native.Modulus",
    .tp_doc = "Modulus(value: bytes, product='auto'): an odd modulus with its Montgomery product\n"
              "('mpn' or 'ifma', chosen at construction) and that product's constants\n"
              "(immutable).",
    .tp_basicsize = sizeof(ModulusObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Modulus_init,
    .tp_dealloc = (destructor)Modulus_dealloc,
    .tp_getset = Modulus_getset,
};

ModulusObject *as_modulus(PyObject *o)
{
    if (!PyObject_TypeCheck(o, &ModulusType) || ((ModulusObject *)o)->m == NULL) {
        PyErr_SetString(PyExc_TypeError, "expected an initialised Modulus");
        return NULL;
    }
    return (ModulusObject *)o;
}

/* Parse a buffer of count fixed-width residues into n limbs each (elements = 0) or into the
 * product's layout (elements = 1); each must be in (0, m) (or [0, m) when allow_zero).
 * Returns 0, or -1 with an exception set. Called with the GIL held. */
static int load_values(const ModulusObject *M, Py_buffer *buf, Residues *out, int allow_zero,
                       int elements)
{
    out->limbs = NULL;
    out->count = 0;
    if (buf->len % (Py_ssize_t)M->width) {
        PyErr_SetString(PyExc_ValueError, "buffer is not a whole number of residues");
        return -1;
    }
    Py_ssize_t count = buf->len / (Py_ssize_t)M->width;
    mp_size_t stride = elements ? M->words : M->n;
    out->count = count;
    out->limbs = PyMem_Malloc(sizeof(mp_limb_t) * ((size_t)count * (size_t)stride + (size_t)M->n));
    if (!out->limbs) {
        PyErr_NoMemory();
        return -1;
    }
    int bad = 0;
    const unsigned char *p = buf->buf;
    mp_limb_t *tmp = out->limbs + count * stride; /* n limbs past the values */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        mp_limb_t *x = out->limbs + i * stride;
        const unsigned char *src = p + i * (Py_ssize_t)M->width;
        int ok;
        if (elements)
            ok = elem_load(M, x, src, tmp, allow_zero);
        else {
            be_to_limbs(x, M->n, src, M->width);
            ok = !(!allow_zero && limbs_is_zero(x, M->n)) && mpn_cmp(x, M->m, M->n) < 0;
        }
        if (!ok) {
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

int load_residues(const ModulusObject *M, Py_buffer *buf, Residues *out, int allow_zero)
{
    return load_values(M, buf, out, allow_zero, 0);
}

int load_elements(const ModulusObject *M, Py_buffer *buf, Residues *out, int allow_zero)
{
    return load_values(M, buf, out, allow_zero, 1);
}

PyObject *new_output(const ModulusObject *M, Py_ssize_t count, unsigned char **data)
{
    PyObject *out = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)M->width);
    if (out)
        *data = (unsigned char *)PyBytes_AS_STRING(out);
    return out;
}

mp_limb_t *scratch(const ModulusObject *M, int extra)
{
    mp_limb_t *t = PyMem_Malloc(sizeof(mp_limb_t) * (size_t)((4 + extra) * M->words));
    if (!t)
        PyErr_NoMemory();
    return t;
}

/* Check an int64 buffer (contiguous, item size 8). */
int int64_buffer(PyObject *obj, Py_buffer *view, const char *name)
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

const char product_kind_doc[] =
             "product_kind() -> str: the Montgomery product a 2048-bit Modulus gets by default in\n"
             "this process: 'ifma' (AVX-512 IFMA, radix 2^52) or 'mpn' (GMP's mpn layer). The\n"
             "CPU decides, and P2PBOOST_IFMA=0 forces 'mpn'.";

PyObject *py_product_kind(PyObject *self, PyObject *args)
{
    return PyUnicode_FromString(ifma_by_default(2048) ? "ifma" : "mpn");
}

const char ifma_supported_doc[] =
             "ifma_supported() -> bool: whether this CPU (and this build) has the AVX-512 IFMA\n"
             "product, whatever P2PBOOST_IFMA says; Modulus(..., product='ifma') needs it.";

PyObject *py_ifma_supported(PyObject *self, PyObject *args)
{
    return PyBool_FromLong(ifma_supported());
}
