/* The Modulus type (an odd modulus with its Montgomery constants) and the checked buffers of
 * residues every kernel reads: whole blocks of the modulus' width, each value in (0, m). */
#include "native.h"

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

PyTypeObject ModulusType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "p2pboost.crypto._native.Modulus",
    .tp_doc = "An odd modulus with its Montgomery constants (immutable).",
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

/* Parse a buffer of count fixed-width residues into limbs; each must be in (0, m) (or [0, m)
 * when allow_zero). Returns 0, or -1 with an exception set. Called with the GIL held. */
int load_residues(const ModulusObject *M, Py_buffer *buf, Residues *out, int allow_zero)
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

PyObject *new_output(const ModulusObject *M, Py_ssize_t count, unsigned char **data)
{
    PyObject *out = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)M->width);
    if (out)
        *data = (unsigned char *)PyBytes_AS_STRING(out);
    return out;
}

mp_limb_t *scratch(const ModulusObject *M, int extra)
{
    mp_limb_t *t = PyMem_Malloc(sizeof(mp_limb_t) * (size_t)((4 + extra) * M->n));
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
