/* The kernels over ciphertexts of one modulus: cell by cell products, segment products
 * (histogram cells), prefix products (cumulative sums over bins), batched division (sibling
 * histograms) and Horner's rule (cipher compression). */
#include "native.h"

/* Offsets of n segments over `total` items: from 0 to total, never decreasing (rising
 * strictly when every segment must hold an item). 0, or -1 with ValueError set. */
static int check_offsets(const int64_t *off, Py_ssize_t n, Py_ssize_t total, int nonempty)
{
    if (n < 0 || off[0] != 0 || off[n] != total) {
        PyErr_SetString(PyExc_ValueError, "offsets must run from 0 to the number of items");
        return -1;
    }
    for (Py_ssize_t s = 0; s < n; s++)
        if (off[s + 1] < off[s] + nonempty) {
            PyErr_SetString(PyExc_ValueError, nonempty ? "every group needs at least one residue"
                                                       : "offsets must not decrease");
            return -1;
        }
    return 0;
}

const char mul_doc[] = "mul(modulus, a, b) -> bytes: a[i] * b[i] mod m for every i.";

PyObject *py_mul(PyObject *self, PyObject *args)
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
    if (load_elements(M, &a, &ra, 0) < 0 || load_elements(M, &b, &rb, 0) < 0)
        goto done;
    unsigned char *out;
    if (!(t = scratch(M, 2)) || !(result = new_output(M, ra.count, &out)))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    mp_size_t n = M->words;
    mp_limb_t *acc = t + 3 * n, *acc1 = t + 4 * n;
    Py_ssize_t i = 0;
    for (; i + 1 < ra.count; i += 2) { /* two at a time: independent products (mont_mul2) */
        const mp_limb_t *a0 = ra.limbs + i * n, *b0 = rb.limbs + i * n;
        mont_mul2(M, acc, a0, b0, acc1, a0 + n, b0 + n, t, t + 2 * n);
        mont_mul2(M, acc, acc, M->r2, acc1, acc1, M->r2, t, t + 2 * n);
        elem_store(M, out + i * (Py_ssize_t)M->width, acc, t);
        elem_store(M, out + (i + 1) * (Py_ssize_t)M->width, acc1, t);
    }
    if (i < ra.count) {
        mul_plain(M, acc, ra.limbs + i * n, rb.limbs + i * n, t, t + 2 * n);
        elem_store(M, out + i * (Py_ssize_t)M->width, acc, t);
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

/* One segment of segment_products in progress: rows first .. end of the index, the next at
 * k, its accumulator and a row's scratch (`words` words each). */
typedef struct {
    int64_t first, end, k;
    mp_limb_t *acc, *row;
} Segment;

/* Load the segment's next row (data[index[k]]) into x and advance; 0 when it is outside
 * (0, m). The row four ahead is prefetched. tmp: n limbs of scratch. */
static inline int segment_row(const ModulusObject *M, Segment *g, mp_limb_t *x,
                              const unsigned char *base, const int64_t *idx, mp_limb_t *tmp)
{
    size_t w = M->width;
    if (g->k + 4 < g->end) {
        const unsigned char *ahead = base + (size_t)idx[g->k + 4] * w;
        __builtin_prefetch(ahead);
        __builtin_prefetch(ahead + w - 1);
    }
    return elem_load(M, x, base + (size_t)idx[g->k++] * w, tmp, 0);
}

const char segment_products_doc[] =
             "segment_products(modulus, data, index, offsets) -> bytes: for each segment s, the\n"
             "product mod m of data[index[k]] for offsets[s] <= k < offsets[s+1] (1 if empty).";

PyObject *py_segment_products(PyObject *self, PyObject *args)
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
    if (check_offsets(off, n_seg, n_idx, 0) < 0)
        goto done;
    for (Py_ssize_t k = 0; k < n_idx; k++)
        if (idx[k] < 0 || idx[k] >= count) {
            PyErr_SetString(PyExc_ValueError, "index out of range");
            goto done;
        }
    unsigned char *out;
    if (!(t = scratch(M, 4)) || !(result = new_output(M, n_seg, &out)))
        goto done;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    /* Two segments at a time, so that their products run as independent pairs (mont_mul2)
     * while both have rows left, then the longer one's tail alone. Only the rows the index
     * names are read (a child's rows among a shard's), each parsed and range-checked as it is
     * used; the next few rows are prefetched, since a cell's rows lie anywhere in the buffer. */
    mp_size_t n = M->words;
    size_t w = M->width;
    for (Py_ssize_t s = 0; s < n_seg && !bad; s += 2) {
        int pair = s + 1 < n_seg ? 2 : 1;
        Segment seg[2];
        for (int q = 0; q < pair; q++) {
            seg[q] = (Segment){off[s + q], off[s + q + 1], off[s + q], t + (3 + 2 * q) * n,
                               t + (4 + 2 * q) * n};
            memcpy(seg[q].acc, M->unit, sizeof(mp_limb_t) * (size_t)n);
            /* the first row goes straight into the accumulator */
            if (seg[q].k < seg[q].end && !segment_row(M, &seg[q], seg[q].acc, data.buf, idx, t))
                bad = 1;
        }
        while (!bad && pair == 2 && seg[0].k < seg[0].end && seg[1].k < seg[1].end) {
            if (!segment_row(M, &seg[0], seg[0].row, data.buf, idx, t) ||
                !segment_row(M, &seg[1], seg[1].row, data.buf, idx, t))
                bad = 1;
            else
                mont_mul2(M, seg[0].acc, seg[0].acc, seg[0].row, seg[1].acc, seg[1].acc,
                          seg[1].row, t, t + 2 * n);
        }
        for (int q = 0; q < pair && !bad; q++) {
            Segment *g = &seg[q];
            while (g->k < g->end) {
                if (!segment_row(M, g, g->row, data.buf, idx, t)) {
                    bad = 1;
                    break;
                }
                mont_mul(M, g->acc, g->acc, g->row, t, t + 2 * n);
            }
            /* acc = product * R^-(rows - 1): put the missing powers of R back */
            if (!bad && g->end > g->first)
                times_r_power(M, g->acc, (uint64_t)(g->end - g->first - 1), t, t + 2 * n);
            elem_store(M, out + (s + q) * (Py_ssize_t)w, g->acc, t);
        }
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

const char prefix_products_doc[] =
             "prefix_products(modulus, data, run) -> bytes: running products mod m within each\n"
             "run of `run` consecutive residues (the cumulative sums of a histogram's bins).";

PyObject *py_prefix_products(PyObject *self, PyObject *args)
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
    if (load_elements(M, &data, &rd, 0) < 0)
        goto done;
    if (run <= 0 || rd.count % run) {
        PyErr_SetString(PyExc_ValueError, "run must be positive and divide the count");
        goto done;
    }
    unsigned char *out;
    if (!(t = scratch(M, 1)) || !(result = new_output(M, rd.count, &out)))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    mp_size_t n = M->words;
    mp_limb_t *acc = t + 3 * n;
    for (Py_ssize_t i = 0; i < rd.count; i++) {
        if (i % run == 0)
            memcpy(acc, rd.limbs + i * n, sizeof(mp_limb_t) * (size_t)n);
        else
            mul_plain(M, acc, acc, rd.limbs + i * n, t, t + 2 * n);
        elem_store(M, out + i * (Py_ssize_t)M->width, acc, t);
    }
    Py_END_ALLOW_THREADS
done:
    PyMem_Free(rd.limbs);
    PyMem_Free(t);
    PyBuffer_Release(&data);
    return result;
}

const char divide_doc[] =
             "divide(modulus, a, b) -> bytes: a[i] * b[i]^-1 mod m for every i, with one\n"
             "inversion for the whole batch (Montgomery's trick). ValueError if some b[i] has no\n"
             "inverse (a factor of the modulus).";

PyObject *py_divide(PyObject *self, PyObject *args)
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
    if (load_elements(M, &a, &ra, 0) < 0 || load_elements(M, &b, &rb, 0) < 0)
        goto done;
    unsigned char *out;
    mp_size_t n = M->words;
    Py_ssize_t count = ra.count;
    if (!(t = scratch(M, 3)) || !(result = new_output(M, count, &out)))
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
    mp_limb_t *inv = t + 3 * n, *x = t + 4 * n, *limbs = t + 5 * n;
    memcpy(prefix, rb.limbs, sizeof(mp_limb_t) * (size_t)n);
    for (Py_ssize_t i = 1; i < count; i++)
        mul_plain(M, prefix + i * n, prefix + (i - 1) * n, rb.limbs + i * n, t, t + 2 * n);
    mpz_t z;
    mpz_init(z);
    elem_to_limbs(M, limbs, prefix + (count - 1) * n);
    mpz_import(z, (size_t)M->n, -1, sizeof(mp_limb_t), 0, 0, limbs);
    if (!mpz_invert(z, z, M->value)) {
        singular = 1;
    }
    else {
        memset(limbs, 0, sizeof(mp_limb_t) * (size_t)M->n);
        mpz_export(limbs, NULL, -1, sizeof(mp_limb_t), 0, 0, z);
        elem_from_limbs(M, inv, limbs);
        for (Py_ssize_t i = count - 1; i > 0; i--) {
            mul_plain(M, x, inv, prefix + (i - 1) * n, t, t + 2 * n); /* b_i^-1 */
            mul_plain(M, x, x, ra.limbs + i * n, t, t + 2 * n);
            elem_store(M, out + i * (Py_ssize_t)M->width, x, t);
            mul_plain(M, inv, inv, rb.limbs + i * n, t, t + 2 * n);
        }
        mul_plain(M, x, inv, ra.limbs, t, t + 2 * n);
        elem_store(M, out, x, t);
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

const char horner_doc[] =
             "horner(modulus, data, shifts, offsets) -> bytes: per group g, acc = data[first];\n"
             "then acc = acc^(2^shifts[k]) * data[k] mod m for the group's other residues (the\n"
             "cipher compression of SecureBoost+: shift, then add). shifts[first] is ignored.";

PyObject *py_horner(PyObject *self, PyObject *args)
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
    if (load_elements(M, &data, &rd, 0) < 0)
        goto done;
    const int64_t *sh = shifts.buf, *off = offsets.buf;
    Py_ssize_t n_groups = offsets.len / 8 - 1;
    if (shifts.len / 8 != rd.count) {
        PyErr_SetString(PyExc_ValueError, "need one shift per residue");
        goto done;
    }
    if (check_offsets(off, n_groups, rd.count, 1) < 0)
        goto done;
    for (Py_ssize_t k = 0; k < rd.count; k++)
        if (sh[k] < 0 || sh[k] > 65536) {
            PyErr_SetString(PyExc_ValueError, "shifts must be in [0, 65536]");
            goto done;
        }
    unsigned char *out;
    if (!(t = scratch(M, 1)) || !(result = new_output(M, n_groups, &out)))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    mp_size_t n = M->words;
    mp_limb_t *acc = t + 3 * n;
    for (Py_ssize_t g = 0; g < n_groups; g++) {
        memcpy(acc, rd.limbs + off[g] * n, sizeof(mp_limb_t) * (size_t)n);
        for (int64_t k = off[g] + 1; k < off[g + 1]; k++) {
            mont_mul(M, acc, acc, M->r2, t, t + 2 * n); /* to Montgomery form */
            for (int64_t s = 0; s < sh[k]; s++)
                mont_mul(M, acc, acc, acc, t, t + 2 * n); /* squarings stay in that form */
            mont_mul(M, acc, acc, rd.limbs + k * n, t, t + 2 * n); /* and leave it */
        }
        elem_store(M, out + g * (Py_ssize_t)M->width, acc, t);
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
