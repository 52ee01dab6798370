/* Fixed-base exponentiation tables and the encryption kernel over them. */
#include "native.h"

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
    if (load_elements(M, &base, &rb, 0) < 0)
        goto done;
    mp_size_t n = M->words;
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

PyTypeObject FixedBaseType = {
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

const char fixed_base_doc[] =
             "fixed_base(tables, exponents, count) -> bytes: for each i < count, the product mod m\n"
             "of tables[k]^exponents[k][i] over k (tables share one Modulus; exponents[k] holds\n"
             "count little-endian exponents of equal width, each below 2^(w * windows) of its\n"
             "table). The fixed-base encryption kernel: one table product per window.";

PyObject *py_fixed_base(PyObject *self, PyObject *args)
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
    mp_size_t n = M->words;
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
                /* two values at a time: two independent products (mont_mul2) */
                for (Py_ssize_t b = 0; b < block; b += 2) {
                    Py_ssize_t pair = b + 1 < block ? 2 : 1;
                    const mp_limb_t *entry[2] = {NULL, NULL};
                    for (Py_ssize_t q = 0; q < pair; q++) {
                        const unsigned char *e = (const unsigned char *)ebuf[k].buf +
                                                 (size_t)(i0 + b + q) * ebytes[k];
                        unsigned d = digit_at(e, ebytes[k], (size_t)j * (size_t)w, w);
                        entry[q] = row + d * (size_t)n;
                    }
                    mp_limb_t *acc = accs + b * n;
                    if (first) {
                        for (Py_ssize_t q = 0; q < pair; q++)
                            memcpy(acc + q * n, entry[q], sizeof(mp_limb_t) * (size_t)n);
                    }
                    else if (pair == 2)
                        mont_mul2(M, acc, acc, entry[0], acc + n, acc + n, entry[1], t,
                                  t + 2 * n);
                    else
                        mont_mul(M, acc, acc, entry[0], t, t + 2 * n);
                }
                first = 0;
            }
        }
        for (Py_ssize_t b = 0; b < block; b++) {
            mp_limb_t *acc = accs + b * n;
            if (first) /* no window at all: the empty product, 1 (R in Montgomery form) */
                memcpy(acc, M->one, sizeof(mp_limb_t) * (size_t)n);
            mont_leave(M, acc, acc, t, t + 2 * n);
            elem_store(M, out + (i0 + b) * (Py_ssize_t)M->width, acc, t);
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
