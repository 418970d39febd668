/*
 * The repeated-call path of opgen's Python functions, in C: a call whose arrays match a plan
 * made by an earlier, fully checked call (exact ndarrays of the same dtypes and shapes,
 * C-contiguous and aligned) goes straight to the op's C entry point with the data pointers.
 * Anything else returns None and the Python side checks the call and says what is wrong;
 * the C entry point checks every call again (alignment, overlaps), so this path only routes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* the build passes the C API's limits (c_api.MAX_OPERANDS, specs.MAX_RANK); a plan beyond
 * these tables gets no fast path (make_plan returns None) */
#ifndef MAX_OPERANDS
#define MAX_OPERANDS 16
#endif
#ifndef MAX_RANK
#define MAX_RANK 12
#endif
#define MAX_ATTRIBUTES 16

/* opgen_<op>_with_arrays: operands' descriptors, data pointers, attribute values */
typedef int (*entry_function)(const void *operands, void *const *data, const double *attributes, void *workspace,
                              size_t workspace_bytes);

enum { ABSENT = 0, USED = 1, IGNORED = 2 }; /* an input: None, passed, or checked but not passed */

typedef struct {
    entry_function entry;
    const void *operands;
    PyObject *keep;                /* owns `operands` */
    int inputs, outputs, attributes;
    int ignores_inputs;            /* some input is IGNORED */
    int mode[MAX_OPERANDS];        /* inputs: ABSENT, USED, IGNORED; outputs: ABSENT or USED */
    PyArray_Descr *descr[MAX_OPERANDS];
    int rank[MAX_OPERANDS];
    npy_intp dims[MAX_OPERANDS][MAX_RANK];
    PyObject *allocate[MAX_OPERANDS]; /* outputs: a callable giving a new array */
    double values[MAX_ATTRIBUTES];
    size_t workspace_bytes;
    void *spare;                   /* a workspace kept between calls (taken and returned under the GIL) */
    PyTypeObject *result;          /* a tuple subclass for several outputs; NULL for one */
} plan;

static void plan_free(PyObject *capsule)
{
    plan *p = (plan *)PyCapsule_GetPointer(capsule, "opgen.plan");
    if (p == NULL) {
        return;
    }
    for (int i = 0; i < p->inputs + p->outputs; ++i) {
        Py_XDECREF(p->descr[i]);
        Py_XDECREF(p->allocate[i]);
    }
    Py_XDECREF(p->keep);
    Py_XDECREF((PyObject *)p->result);
    free(p->spare);
    free(p);
}

/* make_plan(entry, operands, keep, inputs, outputs, attributes, workspace_bytes, result)
 * entry, operands: addresses; inputs: a tuple of (mode, dtype, shape) ((0, None, None) when
 * absent); outputs: a tuple of (dtype, shape, allocate) or None; attributes: floats;
 * result: the result type, or None for one output. */
static PyObject *make_plan(PyObject *self, PyObject *args)
{
    unsigned long long entry, operands;
    unsigned long long workspace_bytes;
    PyObject *keep, *inputs, *outputs, *attributes, *result;
    (void)self;
    if (!PyArg_ParseTuple(args, "KKOO!O!O!KO", &entry, &operands, &keep, &PyTuple_Type, &inputs, &PyTuple_Type,
                          &outputs, &PyTuple_Type, &attributes, &workspace_bytes, &result)) {
        return NULL;
    }
    const Py_ssize_t n_in = PyTuple_GET_SIZE(inputs), n_out = PyTuple_GET_SIZE(outputs);
    if (n_in + n_out > MAX_OPERANDS || PyTuple_GET_SIZE(attributes) > MAX_ATTRIBUTES) {
        Py_RETURN_NONE;
    }
    for (Py_ssize_t i = 0; i < n_in + n_out; ++i) {
        PyObject *entry_tuple = PyTuple_GET_ITEM(i < n_in ? inputs : outputs, i < n_in ? i : i - n_in);
        PyObject *shape = PyTuple_Check(entry_tuple) && PyTuple_GET_SIZE(entry_tuple) == 3
                              ? PyTuple_GET_ITEM(entry_tuple, i < n_in ? 2 : 1)
                              : NULL;
        if (shape != NULL && PyTuple_Check(shape) && PyTuple_GET_SIZE(shape) > MAX_RANK) {
            Py_RETURN_NONE;
        }
    }
    plan *p = (plan *)calloc(1, sizeof(plan));
    if (p == NULL) {
        return PyErr_NoMemory();
    }
    PyObject *capsule = PyCapsule_New(p, "opgen.plan", plan_free);
    if (capsule == NULL) {
        free(p);
        return NULL;
    }
    p->entry = (entry_function)(uintptr_t)entry;
    p->operands = (const void *)(uintptr_t)operands;
    p->keep = Py_NewRef(keep);
    p->inputs = (int)n_in;
    p->outputs = (int)n_out;
    p->attributes = (int)PyTuple_GET_SIZE(attributes);
    p->workspace_bytes = (size_t)workspace_bytes;
    p->result = result == Py_None ? NULL : (PyTypeObject *)Py_NewRef(result);
    for (Py_ssize_t i = 0; i < n_in + n_out; ++i) {
        const int is_input = i < n_in;
        PyObject *entry_tuple = PyTuple_GET_ITEM(is_input ? inputs : outputs, is_input ? i : i - n_in);
        PyObject *dtype, *shape, *extra;
        int mode = USED;
        if (entry_tuple == Py_None) {
            p->mode[i] = ABSENT;
            continue;
        }
        if (is_input) {
            if (!PyArg_ParseTuple(entry_tuple, "iOO", &mode, &dtype, &shape)) {
                goto fail;
            }
            extra = NULL;
        } else if (!PyArg_ParseTuple(entry_tuple, "OOO", &dtype, &shape, &extra)) {
            goto fail;
        }
        p->mode[i] = mode;
        p->ignores_inputs |= mode == IGNORED;
        if (mode == ABSENT) {
            continue;
        }
        if (!PyArray_DescrConverter(dtype, &p->descr[i])) {
            goto fail;
        }
        if (!PyTuple_Check(shape) || PyTuple_GET_SIZE(shape) > MAX_RANK) {
            PyErr_SetString(PyExc_ValueError, "make_plan: a shape must be a tuple");
            goto fail;
        }
        p->rank[i] = (int)PyTuple_GET_SIZE(shape);
        for (int d = 0; d < p->rank[i]; ++d) {
            p->dims[i][d] = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, d));
        }
        if (PyErr_Occurred()) {
            goto fail;
        }
        p->allocate[i] = extra == NULL ? NULL : Py_NewRef(extra);
    }
    for (int a = 0; a < p->attributes; ++a) {
        p->values[a] = PyFloat_AsDouble(PyTuple_GET_ITEM(attributes, a));
    }
    if (PyErr_Occurred()) {
        goto fail;
    }
    return capsule;
fail:
    Py_DECREF(capsule);
    return NULL;
}

/* `array` is an exact ndarray of the plan's dtype and shape for operand i, C-contiguous and
 * aligned (and writeable for outputs) */
static int fits(const plan *p, int i, PyObject *array, int flags)
{
    if (!PyArray_CheckExact(array)) {
        return 0;
    }
    PyArrayObject *a = (PyArrayObject *)array;
    if (PyArray_NDIM(a) != p->rank[i] || !PyArray_CHKFLAGS(a, flags)) {
        return 0;
    }
    const npy_intp *dims = PyArray_DIMS(a);
    for (int d = 0; d < p->rank[i]; ++d) {
        if (dims[d] != p->dims[i][d]) {
            return 0;
        }
    }
    PyArray_Descr *descr = PyArray_DESCR(a);
    return descr == p->descr[i] || PyArray_EquivTypes(descr, p->descr[i]);
}

/* the plan among `plans` whose inputs `arrays` fit, with their data pointers and (borrowed)
 * its capsule; NULL if none */
static plan *match(PyObject *plans, PyObject *const *arrays, int count, void **data, PyObject **capsule)
{
    const Py_ssize_t n = PyList_GET_SIZE(plans);
    for (Py_ssize_t k = 0; k < n; ++k) {
        plan *p = (plan *)PyCapsule_GetPointer(PyList_GET_ITEM(plans, k), "opgen.plan");
        if (p == NULL) {
            PyErr_Clear();
            continue;
        }
        if (p->inputs != count) {
            continue;
        }
        int ok = 1;
        for (int i = 0; ok && i < count; ++i) {
            if (p->mode[i] == ABSENT) {
                ok = arrays[i] == Py_None;
                data[i] = NULL;
            } else {
                ok = fits(p, i, arrays[i], NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED);
                data[i] = ok && p->mode[i] == USED ? PyArray_DATA((PyArrayObject *)arrays[i]) : NULL;
            }
        }
        if (ok) {
            *capsule = PyList_GET_ITEM(plans, k);
            return p;
        }
    }
    return NULL;
}

/* The memory of the larger outputs opgen allocates (runtime.py, plan.ALIGNED_OUTPUT_BYTES):
 * starting on a 64-byte boundary, a cache line, where NumPy's own allocator starts them 16 or
 * 32 bytes past one. Set around their allocation only (`allocated`; NumPy's handler is per
 * context), so the arrays own their memory as any NumPy array does and NumPy frees it through
 * this handler. posix_memalign's memory may go to realloc (which keeps the contents, not the
 * alignment) and free. */
#if defined(_WIN32)
#define ALIGNED_OUTPUTS 0 /* _aligned_malloc's memory cannot go to realloc or free */
#else
#define ALIGNED_OUTPUTS 1
#define OUTPUT_ALIGNMENT 64

static void *aligned_malloc(void *context, size_t size)
{
    void *memory = NULL;
    (void)context;
    return posix_memalign(&memory, OUTPUT_ALIGNMENT, size > 0 ? size : 1) == 0 ? memory : NULL;
}

static void *aligned_calloc(void *context, size_t count, size_t size)
{
    if (size != 0 && count > SIZE_MAX / size) {
        return NULL;
    }
    void *memory = aligned_malloc(context, count * size);
    if (memory != NULL) {
        memset(memory, 0, count * size);
    }
    return memory;
}

static void *aligned_realloc(void *context, void *memory, size_t size)
{
    (void)context;
    return realloc(memory, size > 0 ? size : 1);
}

static void aligned_free(void *context, void *memory, size_t size)
{
    (void)context;
    (void)size;
    free(memory);
}

static PyDataMem_Handler aligned_handler = {
    "opgen_aligned_64", 1, { NULL, aligned_malloc, aligned_calloc, aligned_realloc, aligned_free }
};
#endif
static PyObject *aligned_capsule = NULL; /* the handler, as NumPy takes it; NULL: NumPy's own */

/* Ours as the context's handler; the one it replaces (NULL: none set, NumPy's own allocates). */
static PyObject *aligned_handler_set(void)
{
    PyObject *previous = aligned_capsule != NULL ? PyDataMem_SetHandler(aligned_capsule) : NULL;
    if (previous == NULL) {
        PyErr_Clear();
    }
    return previous;
}

static void aligned_handler_restore(PyObject *previous)
{
    if (previous != NULL) {
        PyObject *ours = PyDataMem_SetHandler(previous);
        if (ours == NULL) {
            PyErr_Clear();
        }
        Py_XDECREF(ours);
        Py_DECREF(previous);
    }
}

/* allocated(function): function() with the outputs' handler set (runtime.py: the larger outputs) */
static PyObject *allocated(PyObject *self, PyObject *function)
{
    (void)self;
    PyObject *previous = aligned_handler_set();
    PyObject *result = PyObject_CallNoArgs(function);
    aligned_handler_restore(previous);
    return result;
}

/* The outputs for `out` (None: new arrays), as new references in `arrays`; 0 if `out` does not fit. */
static int outputs_for(const plan *p, PyObject *out, PyObject **arrays, void **data)
{
    const int n = p->outputs, first = p->inputs;
    if (out != Py_None) {
        if (n == 1 && !PyTuple_Check(out)) {
            if (p->mode[first] == ABSENT || !fits(p, first, out, NPY_ARRAY_CARRAY)) {
                return 0;
            }
            arrays[0] = Py_NewRef(out);
            data[0] = PyArray_DATA((PyArrayObject *)out);
            return 1;
        }
        if (!PyTuple_CheckExact(out) || PyTuple_GET_SIZE(out) != n) {
            return 0;
        }
    }
    for (int o = 0; o < n; ++o) {
        PyObject *given = out == Py_None ? Py_None : PyTuple_GET_ITEM(out, o);
        const int i = first + o;
        if (given != Py_None) {
            if (p->mode[i] == ABSENT || !fits(p, i, given, NPY_ARRAY_CARRAY)) {
                goto fail;
            }
            arrays[o] = Py_NewRef(given);
        } else if (p->mode[i] == ABSENT) {
            arrays[o] = Py_NewRef(Py_None);
        } else {
            arrays[o] = PyObject_CallNoArgs(p->allocate[o + first]);
            if (arrays[o] == NULL) {
                PyErr_Clear();
                goto fail;
            }
        }
        data[o] = arrays[o] == Py_None ? NULL : PyArray_DATA((PyArrayObject *)arrays[o]);
        continue;
    fail:
        for (int done = 0; done < o; ++done) {
            Py_DECREF(arrays[done]);
        }
        return 0;
    }
    return 1;
}

/* call(plans, *inputs, out): the op's result, or None when no plan fits (the caller then
 * takes the checked path) */
static PyObject *call(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    void *data[MAX_OPERANDS];
    PyObject *arrays[MAX_OPERANDS];
    (void)self;
    if (nargs < 2 || !PyList_CheckExact(args[0]) || nargs - 2 > MAX_OPERANDS) {
        PyErr_SetString(PyExc_TypeError, "call(plans, *inputs, out)");
        return NULL;
    }
    const int count = (int)(nargs - 2);
    PyObject *capsule = NULL;
    plan *p = match(args[0], args + 1, count, data, &capsule);
    if (p == NULL || (args[nargs - 1] != Py_None && p->ignores_inputs)) {
        /* the C entry point never sees an ignored input, so cannot tell whether `out` overlaps
         * it: the checked path does */
        Py_RETURN_NONE;
    }
    if (!outputs_for(p, args[nargs - 1], arrays, data + count)) {
        Py_RETURN_NONE;
    }
    /* the plan's spare workspace, else a new one (a thread that finds it taken); large ones
     * would otherwise be mapped and faulted in again on every call */
    void *workspace = p->spare;
    p->spare = NULL;
    if (p->workspace_bytes > 0 && workspace == NULL && (workspace = malloc(p->workspace_bytes)) == NULL) {
        for (int o = 0; o < p->outputs; ++o) {
            Py_DECREF(arrays[o]);
        }
        return PyErr_NoMemory();
    }
    int status;
    Py_INCREF(capsule); /* other threads may drop the plan from the list meanwhile */
    Py_BEGIN_ALLOW_THREADS
    status = p->entry(p->operands, data, p->values, workspace, p->workspace_bytes);
    Py_END_ALLOW_THREADS
    if (p->spare == NULL) {
        p->spare = workspace;
    } else {
        free(workspace);
    }
    PyObject *result = NULL;
    if (status != 0) { /* the checked path runs the call again and reports */
        result = Py_NewRef(Py_None);
    } else if (p->result == NULL) {
        result = Py_NewRef(arrays[0]);
    } else if ((result = p->result->tp_alloc(p->result, p->outputs)) != NULL) {
        for (int o = 0; o < p->outputs; ++o) {
            PyTuple_SET_ITEM(result, o, Py_NewRef(arrays[o]));
        }
    }
    for (int o = 0; o < p->outputs; ++o) {
        Py_DECREF(arrays[o]);
    }
    Py_DECREF(capsule);
    return result;
}

static PyMethodDef methods[] = {
    { "make_plan", make_plan, METH_VARARGS, "A plan of a checked call, for call()." },
    { "allocated", allocated, METH_O, "allocated(function): function(), its arrays on 64-byte boundaries." },
    { "call", (PyCFunction)(void (*)(void))call, METH_FASTCALL, "call(plans, *inputs, out): the result, or None." },
    { NULL, NULL, 0, NULL },
};

static struct PyModuleDef module = { PyModuleDef_HEAD_INIT, "_opgen_fastcall", NULL, -1, methods, NULL, NULL, NULL, NULL };

PyMODINIT_FUNC PyInit__opgen_fastcall(void)
{
    import_array();
#if ALIGNED_OUTPUTS
    aligned_capsule = PyCapsule_New(&aligned_handler, "mem_handler", NULL);
    if (aligned_capsule == NULL) {
        return NULL;
    }
#endif
    return PyModule_Create(&module);
}
