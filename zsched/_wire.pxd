# cython: language_level=3
# msgpack written into C buffers and read in place, for the per-task frames. Each write is
# msgpack-python's shortest form, so a frame is byte for byte what ``protocol.encode`` makes.
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.long cimport PyLong_FromLongLong, PyLong_FromUnsignedLongLong
from cpython.ref cimport PyObject
from libc.stdint cimport INT64_MAX, int8_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy


cdef struct Buffer:
    uint8_t *data
    Py_ssize_t length
    Py_ssize_t capacity


cdef inline int reserve(Buffer *b, Py_ssize_t more) except -1:
    """Room for ``more`` bytes after ``b.length``."""
    cdef Py_ssize_t capacity
    cdef uint8_t *data
    if b.length + more <= b.capacity:
        return 0
    capacity = b.capacity * 2 if b.capacity else 16384
    while capacity < b.length + more:
        capacity *= 2
    data = <uint8_t *>realloc(b.data, capacity)
    if data == NULL:
        raise MemoryError()
    b.data = data
    b.capacity = capacity
    return 0


cdef inline void *grow_array(void *array, Py_ssize_t count, size_t size) except NULL:
    cdef void *p = realloc(array, count * size)
    if p == NULL:
        raise MemoryError()
    return p


cdef inline void release(Buffer *b) noexcept:
    free(b.data)
    b.data = NULL
    b.length = b.capacity = 0


cdef inline void put_big_endian(uint8_t *p, uint64_t value, int n) noexcept:
    cdef int i
    for i in range(n - 1, -1, -1):
        p[i] = value & 0xff
        value >>= 8


# Largest writes, for ``reserve``: an unsigned int, a header of bytes, an array or a map.
cdef enum:
    UINT_ROOM = 9
    HEADER_ROOM = 5


cdef inline void write_uint(Buffer *b, uint64_t value) noexcept:
    cdef uint8_t *p = b.data + b.length
    if value <= 0x7f:
        p[0] = <uint8_t>value
        b.length += 1
    elif value <= 0xff:
        p[0] = 0xcc
        p[1] = <uint8_t>value
        b.length += 2
    elif value <= 0xffff:
        p[0] = 0xcd
        put_big_endian(p + 1, value, 2)
        b.length += 3
    elif value <= 0xffffffffULL:
        p[0] = 0xce
        put_big_endian(p + 1, value, 4)
        b.length += 5
    else:
        p[0] = 0xcf
        put_big_endian(p + 1, value, 8)
        b.length += 9


cdef inline void write_header(Buffer *b, uint64_t n, uint8_t fix, uint8_t fix_max,
                              uint8_t tag8, uint8_t tag16) noexcept:
    """The header of a container or of bytes: ``fix | n`` up to ``fix_max`` (none for bytes),
    else ``tag8`` (bytes only), ``tag16`` or ``tag16 + 1`` (32 bits) with the length."""
    cdef uint8_t *p = b.data + b.length
    if n <= fix_max and fix:
        p[0] = fix | <uint8_t>n
        b.length += 1
    elif n <= 0xff and tag8:
        p[0] = tag8
        p[1] = <uint8_t>n
        b.length += 2
    elif n <= 0xffff:
        p[0] = tag16
        put_big_endian(p + 1, n, 2)
        b.length += 3
    else:
        p[0] = tag16 + 1
        put_big_endian(p + 1, n, 4)
        b.length += 5


cdef inline void write_array_header(Buffer *b, uint64_t n) noexcept:
    write_header(b, n, 0x90, 15, 0, 0xdc)


cdef inline void write_map_header(Buffer *b, uint64_t n) noexcept:
    write_header(b, n, 0x80, 15, 0, 0xde)


cdef inline void write_bin(Buffer *b, const char *data, Py_ssize_t n) noexcept:
    """Bytes (room reserved: ``HEADER_ROOM + n``)."""
    write_header(b, <uint64_t>n, 0, 0, 0xc4, 0xc5)
    memcpy(b.data + b.length, data, n)
    b.length += n


cdef inline bytes join(const char *head, Py_ssize_t head_length, Buffer *first, Buffer *second):
    """``head``, then ``first``'s bytes, then ``second``'s, as one bytes object."""
    cdef bytes joined = PyBytes_FromStringAndSize(NULL, head_length + first.length + second.length)
    cdef char *p = PyBytes_AS_STRING(joined)
    memcpy(p, head, head_length)
    memcpy(p + head_length, first.data, first.length)
    memcpy(p + head_length + first.length, second.data, second.length)
    return joined


cdef inline void write_int(Buffer *b, int64_t value) noexcept:
    """An int in msgpack's shortest form (room for 9 bytes reserved)."""
    cdef uint8_t *p = b.data + b.length
    if value >= 0:
        write_uint(b, <uint64_t>value)
    elif value >= -32:
        p[0] = <uint8_t>(value & 0xff)
        b.length += 1
    elif value >= -0x80:
        p[0] = 0xd0
        p[1] = <uint8_t>(value & 0xff)
        b.length += 2
    elif value >= -0x8000:
        p[0] = 0xd1
        put_big_endian(p + 1, <uint64_t>value, 2)
        b.length += 3
    elif value >= -0x80000000LL:
        p[0] = 0xd2
        put_big_endian(p + 1, <uint64_t>value, 4)
        b.length += 5
    else:
        p[0] = 0xd3
        put_big_endian(p + 1, <uint64_t>value, 8)
        b.length += 9


# Reading msgpack in place: each read takes one value of the expected kind and raises
# ValueError on anything else.

cdef struct Reader:
    const uint8_t *p
    const uint8_t *end


cdef inline int need(Reader *r, Py_ssize_t n) except -1:
    if r.end - r.p < n:
        raise ValueError("the body ends too soon")
    return 0


cdef inline uint64_t get_big_endian(const uint8_t *p, int n) noexcept:
    cdef uint64_t value = 0
    cdef int i
    for i in range(n):
        value = (value << 8) | p[i]
    return value


cdef inline int read_int(Reader *r, int64_t *value, bint *big) except -1:
    """An int in any of msgpack's forms, in ``value``; ``big``: an unsigned one past
    2**63 - 1 (``value`` then holds its 64 bits)."""
    need(r, 1)
    cdef uint8_t tag = r.p[0]
    cdef int n
    cdef uint64_t bits
    r.p += 1
    big[0] = False
    if tag <= 0x7f:  # a positive fixint
        value[0] = tag
        return 0
    if tag >= 0xe0:  # a negative one
        value[0] = <int8_t>tag
        return 0
    if 0xcc <= tag <= 0xcf:  # unsigned, 8 to 64 bits
        n = 1 << (tag - 0xcc)
        need(r, n)
        bits = get_big_endian(r.p, n)
        big[0] = bits > <uint64_t>INT64_MAX
    elif 0xd0 <= tag <= 0xd3:  # signed, 8 to 64 bits
        n = 1 << (tag - 0xd0)
        need(r, n)
        bits = get_big_endian(r.p, n)
        if n < 8 and bits >> (8 * n - 1):  # negative: extend the sign
            bits |= ~((<uint64_t>1 << (8 * n)) - 1)
    else:
        raise ValueError("an int was expected")
    r.p += n
    value[0] = <int64_t>bits
    return 0


cdef inline Py_ssize_t read_array_header(Reader *r) except -1:
    """The length of the array that starts here."""
    need(r, 1)
    cdef uint8_t tag = r.p[0]
    cdef int n
    r.p += 1
    if 0x90 <= tag <= 0x9f:
        return tag & 0x0f
    if tag == 0xdc or tag == 0xdd:
        n = 2 if tag == 0xdc else 4
        need(r, n)
        r.p += n
        return <Py_ssize_t>get_big_endian(r.p - n, n)
    raise ValueError("an array was expected")


cdef inline int read_bin(Reader *r, const uint8_t **data, Py_ssize_t *n) except -1:
    """Bytes: where they start, in ``data``, and how many, in ``n``."""
    need(r, 1)
    cdef uint8_t tag = r.p[0]
    cdef int size
    r.p += 1
    if not 0xc4 <= tag <= 0xc6:
        raise ValueError("bytes were expected")
    size = 1 << (tag - 0xc4)
    need(r, size)
    n[0] = <Py_ssize_t>get_big_endian(r.p, size)
    r.p += size
    need(r, n[0])
    data[0] = r.p
    r.p += n[0]
    return 0


cdef inline object read_int_object(Reader *r):
    cdef int64_t value
    cdef bint big
    read_int(r, &value, &big)
    return PyLong_FromUnsignedLongLong(<uint64_t>value) if big else PyLong_FromLongLong(value)


cdef inline object read_number(Reader *r):
    """An int or a float (32 or 64 bits), as msgpack decodes it."""
    need(r, 1)
    cdef uint8_t tag = r.p[0]
    cdef uint64_t bits
    cdef uint32_t bits32
    cdef double number
    cdef float number32
    if tag == 0xcb:
        need(r, 9)
        bits = get_big_endian(r.p + 1, 8)
        memcpy(&number, &bits, 8)
        r.p += 9
        return number
    if tag == 0xca:
        need(r, 5)
        bits32 = <uint32_t>get_big_endian(r.p + 1, 4)
        memcpy(&number32, &bits32, 4)
        r.p += 5
        return <double>number32
    return read_int_object(r)


cdef int int_bits(object value, int64_t *bits, unsigned char *big) except -1


cdef inline bytes as_bytes(object value, str what):
    if type(value) is not bytes:
        raise TypeError(f"{what} must be bytes, not {type(value).__name__}")
    return <bytes>value


cdef class FrameRows:
    cdef bytes _frame
    cdef Py_ssize_t _array  # where the array of rows starts in _frame
    cdef Py_ssize_t _first  # where its first row starts
    cdef Py_ssize_t _end    # where it ends
    cdef Py_ssize_t _count


cdef class StatusRows(FrameRows):
    pass


cdef class SubmitRows(FrameRows):
    pass


cdef class ResultRows:
    cdef Buffer _data
    cdef Py_ssize_t *_ends      # where each row ends in _data
    cdef Py_ssize_t *_payloads  # each row's payload size
    cdef Py_ssize_t _count
    cdef Py_ssize_t _capacity
    cdef int _write(self, int64_t client_task_id, bint big, int64_t state, const char *payload,
                    Py_ssize_t n) except -1


cdef class LaunchWriter:
    cdef bytes _header
    cdef set _known           # the executor's digests
    cdef dict _needed         # functions the frame being written carries
    cdef object _last_digest  # of the row before: held by the executor or in _needed
    cdef list _frames
    cdef Buffer _rows         # the rows of the frame being written
    cdef Py_ssize_t _n_rows
    cdef Py_ssize_t _size     # its rows' arguments and its functions, in bytes
    cdef Py_ssize_t _limit
    cdef int _cut(self) except -1
    cdef list finish(self)


cdef inline int write_launch_row(Buffer *rows, uint64_t task_id, uint64_t attempt, bytes digest,
                                 const char *args, Py_ssize_t args_len) except -1:
    """The LaunchTasks row ``[task id, attempt, function digest, pickled arguments]``."""
    reserve(rows, 1 + 2 * UINT_ROOM + 2 * HEADER_ROOM + len(digest) + args_len)
    rows.data[rows.length] = 0x94
    rows.length += 1
    write_uint(rows, task_id)
    write_uint(rows, attempt)
    write_bin(rows, PyBytes_AS_STRING(digest), len(digest))
    write_bin(rows, args, args_len)
    return 0


cdef inline int add_launch_row(LaunchWriter writer, uint64_t task_id, uint64_t attempt,
                               object digest, PyObject *blob, const char *args,
                               Py_ssize_t args_len) except -1:
    """``writer``'s next row ``[task id, attempt, digest, args]``; ``blob``: the function of
    ``digest``, borrowed (read only if the executor does not hold it). The scheduling core's
    fused launch calls it for each task: inline, and taking no reference to the blob."""
    cdef bytes digest_bytes = as_bytes(digest, "a function digest")
    cdef Py_ssize_t row_size = args_len
    cdef bint new = False
    if digest is not writer._last_digest:  # a run of rows of one function shares its digest
        new = digest not in writer._known and digest not in writer._needed
        writer._last_digest = digest
    if new:
        row_size += len(<object>blob)
    if writer._n_rows and writer._size + row_size > writer._limit:
        writer._cut()  # ``new`` stays: _needed did not hold digest
    if new:
        writer._needed[digest] = <object>blob
    write_launch_row(&writer._rows, task_id, attempt, digest_bytes, args, args_len)
    writer._n_rows += 1
    writer._size += row_size
    return 0
