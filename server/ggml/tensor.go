package ggml

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Type is enum ggml_type.
type Type int32

// The tensor types the project uses (values from ggml.h).
const (
	TypeF32  Type = 0
	TypeF16  Type = 1
	TypeQ8_0 Type = 8
	TypeI8   Type = 24
	TypeI16  Type = 25
	TypeI32  Type = 26
	TypeI64  Type = 27
	TypeF64  Type = 28
	TypeBF16 Type = 30
)

// String is ggml's type name (f32, f16, i32, ...).
func (t Type) String() string {
	switch t {
	case TypeF32:
		return "f32"
	case TypeF16:
		return "f16"
	case TypeQ8_0:
		return "q8_0"
	case TypeI8:
		return "i8"
	case TypeI16:
		return "i16"
	case TypeI32:
		return "i32"
	case TypeI64:
		return "i64"
	case TypeF64:
		return "f64"
	case TypeBF16:
		return "bf16"
	}
	return fmt.Sprintf("type%d", int32(t))
}

// DefaultGraphSize is ggml's default graph capacity (GGML_DEFAULT_GRAPH_SIZE).
const DefaultGraphSize = 2048

// ContextOptions sizes a Context's metadata pool.
type ContextOptions struct {
	// Tensors is the most tensors (inputs, weights, op results, views) the
	// context will hold.
	Tensors int
	// Graphs is how many graphs of GraphSize nodes it will hold.
	Graphs int
	// GraphSize is each graph's node capacity (0 = DefaultGraphSize).
	GraphSize int
}

// Context is a ggml context created with no_alloc: it holds tensor and graph
// metadata only; tensor data lives in backend buffers (Alloc, Allocator). One
// goroutine uses a Context at a time. Ops never abort the process: a bad op
// records the context's first error (see Err) and returns an invalid tensor
// that later ops propagate.
type Context struct {
	lib *Library
	h   cContext
	// closed is atomic: tensors of a shared context (weights) are checked
	// from every session's goroutine.
	closed atomic.Bool
	err    error
}

// NewContext creates a no-alloc context with room for maxTensors tensors and
// one graph of DefaultGraphSize nodes.
func (l *Library) NewContext(maxTensors int) (*Context, error) {
	return l.NewContextWith(ContextOptions{Tensors: maxTensors, Graphs: 1})
}

// NewContextWith creates a no-alloc context sized by opts.
func (l *Library) NewContextWith(opts ContextOptions) (*Context, error) {
	if opts.Tensors <= 0 {
		return nil, fmt.Errorf("ggml: a context needs room for at least one tensor (got %d)", opts.Tensors)
	}
	if opts.Graphs < 0 || opts.GraphSize < 0 {
		return nil, fmt.Errorf("ggml: negative graph count or size (%d graphs of %d)", opts.Graphs, opts.GraphSize)
	}
	gs := opts.GraphSize
	if gs == 0 {
		gs = DefaultGraphSize
	}
	mem := uintptr(opts.Tensors) * l.tensorOverhead
	if opts.Graphs > 0 {
		mem += uintptr(opts.Graphs) * l.fn.graphOverheadCustom(uintptr(gs), false)
	}
	h := l.fn.init(initParams{memSize: mem, noAlloc: true})
	if h == 0 {
		return nil, fmt.Errorf("ggml: ggml_init failed for a %d-byte metadata pool", mem)
	}
	l.counts.contexts.Add(1)
	return &Context{lib: l, h: h}, nil
}

// Close frees the context's metadata. Tensors and graphs of the context are
// unusable afterwards; buffers allocated for them stay owned by their Buffer.
// Close is idempotent.
func (c *Context) Close() error {
	if c == nil || !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	c.lib.fn.free(c.h)
	c.lib.counts.contexts.Add(-1)
	c.h = 0
	return nil
}

// Err returns the first error an op or graph call recorded, or ErrClosed.
func (c *Context) Err() error {
	if c == nil {
		return fmt.Errorf("%w: nil context", ErrClosed)
	}
	if c.err != nil {
		return c.err
	}
	if c.closed.Load() {
		return fmt.Errorf("%w: context", ErrClosed)
	}
	return nil
}

// Library is the library the context belongs to.
func (c *Context) Library() *Library { return c.lib }

func (c *Context) fail(op string, format string, args ...any) *Tensor {
	if c.err == nil {
		c.err = fmt.Errorf("ggml: %s: %s", op, fmt.Sprintf(format, args...))
	}
	return &Tensor{ctx: c}
}

// room reports whether the metadata pool has space for n more tensors.
func (c *Context) room(n int) bool {
	return c.lib.fn.usedMem(c.h)+uintptr(n)*c.lib.tensorOverhead <= c.lib.fn.getMemSize(c.h)
}

// begin checks that an op may run: the context is open and error-free, every
// input is a valid tensor of an open context, and there is room for n tensors.
func (c *Context) begin(op string, n int, in ...*Tensor) bool {
	if c.closed.Load() {
		if c.err == nil {
			c.err = fmt.Errorf("%w: ggml: %s on a closed context", ErrClosed, op)
		}
		return false
	}
	if c.err != nil {
		return false
	}
	for i, t := range in {
		if t == nil || t.h == 0 {
			c.fail(op, "input %d is not a valid tensor", i)
			return false
		}
		if t.ctx.closed.Load() {
			c.err = fmt.Errorf("%w: ggml: %s: input %d belongs to a closed context", ErrClosed, op, i)
			return false
		}
	}
	if !c.room(n) {
		c.fail(op, "the context is full (%d bytes used of %d); create it with room for more tensors", c.lib.fn.usedMem(c.h), c.lib.fn.getMemSize(c.h))
		return false
	}
	return true
}

func (c *Context) wrap(op string, h cTensor) *Tensor {
	if h == 0 {
		return c.fail(op, "ggml returned no tensor")
	}
	return &Tensor{ctx: c, h: h}
}

// Tensor is a handle to a tensor's metadata in a Context. It is valid while
// its Context is open; its data is reachable while the buffer holding it is.
type Tensor struct {
	ctx *Context
	h   cTensor
}

// Valid reports whether t is a real tensor of an open context.
func (t *Tensor) Valid() bool { return t != nil && t.h != 0 && t.ctx != nil && !t.ctx.closed.Load() }

// Context is the tensor's context.
func (t *Tensor) Context() *Context { return t.ctx }

// Shape is ne[0..3] (ne[0] is the fastest-varying dimension). Zero for an
// invalid tensor.
func (t *Tensor) Shape() [4]int64 {
	if !t.Valid() {
		return [4]int64{}
	}
	return tensorNE(t.h)
}

// Strides is nb[0..3] in bytes.
func (t *Tensor) Strides() [4]uint64 {
	if !t.Valid() {
		return [4]uint64{}
	}
	return tensorNB(t.h)
}

// Type is the tensor's element type.
func (t *Tensor) Type() Type {
	if !t.Valid() {
		return -1
	}
	return tensorType(t.h)
}

// Elements is the number of elements.
func (t *Tensor) Elements() int64 {
	if !t.Valid() {
		return 0
	}
	return t.ctx.lib.fn.nelements(t.h)
}

// Bytes is the size of the tensor's data in bytes.
func (t *Tensor) Bytes() int {
	if !t.Valid() {
		return 0
	}
	return int(t.ctx.lib.fn.nbytes(t.h))
}

// Contiguous reports whether the elements are packed in order.
func (t *Tensor) Contiguous() bool { return t.Valid() && t.ctx.lib.fn.isContiguous(t.h) }

// Name is the tensor's name.
func (t *Tensor) Name() string {
	if !t.Valid() {
		return ""
	}
	return goString(t.ctx.lib.fn.getName(t.h))
}

// SetName names the tensor (at most 63 bytes) and returns it.
func (t *Tensor) SetName(name string) *Tensor {
	if !t.Valid() {
		return t
	}
	if len(name) > maxNameLen {
		t.ctx.fail("set_name", "name %q is longer than %d bytes", name, maxNameLen)
		return t
	}
	t.ctx.lib.fn.setName(t.h, name)
	return t
}

// SetInput marks the tensor as a graph input (the allocator keeps it apart).
func (t *Tensor) SetInput() *Tensor {
	if t.Valid() {
		t.ctx.lib.fn.setInput(t.h)
	}
	return t
}

// SetOutput marks the tensor as a graph output (the allocator never reuses it).
func (t *Tensor) SetOutput() *Tensor {
	if t.Valid() {
		t.ctx.lib.fn.setOutput(t.h)
	}
	return t
}

// String describes the tensor: name, type and shape.
func (t *Tensor) String() string {
	if !t.Valid() {
		return "<invalid tensor>"
	}
	ne := t.Shape()
	return fmt.Sprintf("%s %s [%d %d %d %d]", t.Name(), t.Type(), ne[0], ne[1], ne[2], ne[3])
}

// dataCheck verifies t can be read or written over [off, off+n) bytes.
func (t *Tensor) dataCheck(op string, off, n int) error {
	if t == nil || t.h == 0 || t.ctx == nil {
		return fmt.Errorf("ggml: %s: not a valid tensor", op)
	}
	if t.ctx.closed.Load() {
		return fmt.Errorf("%w: ggml: %s: the tensor belongs to a closed context", ErrClosed, op)
	}
	buf := tensorBuffer(t.h)
	if buf == 0 || tensorData(t.h) == 0 {
		return fmt.Errorf("ggml: %s: tensor %s has no data yet; allocate its context (Context.Alloc) or its graph (Allocator.Alloc) first", op, t)
	}
	if !t.ctx.lib.isLive(buf) {
		return fmt.Errorf("%w: ggml: %s: the buffer holding tensor %s was closed", ErrClosed, op, t)
	}
	size := t.Bytes()
	if off < 0 || n < 0 || off+n > size {
		return fmt.Errorf("ggml: %s: range [%d, %d) is outside tensor %s of %d bytes", op, off, off+n, t, size)
	}
	return nil
}

// SetBytes copies data into the tensor starting at byte offset off.
func (t *Tensor) SetBytes(off int, data []byte) error {
	if err := t.dataCheck("tensor_set", off, len(data)); err != nil {
		return err
	}
	if len(data) == 0 {
		return nil
	}
	t.ctx.lib.fn.backendTensorSet(t.h, unsafe.Pointer(&data[0]), uintptr(off), uintptr(len(data)))
	return nil
}

// ReadBytes copies len(dst) bytes of the tensor starting at byte offset off.
func (t *Tensor) ReadBytes(off int, dst []byte) error {
	if err := t.dataCheck("tensor_get", off, len(dst)); err != nil {
		return err
	}
	if len(dst) == 0 {
		return nil
	}
	t.ctx.lib.fn.backendTensorGet(t.h, unsafe.Pointer(&dst[0]), uintptr(off), uintptr(len(dst)))
	return nil
}

func (t *Tensor) wantType(op string, want Type) error {
	if !t.Valid() {
		return fmt.Errorf("ggml: %s: not a valid tensor", op)
	}
	if got := t.Type(); got != want {
		return fmt.Errorf("ggml: %s: tensor %s is %s, not %s", op, t, got, want)
	}
	if !t.Contiguous() {
		return fmt.Errorf("ggml: %s: tensor %s is a non-contiguous view; read or write the tensor it views, or Cont it in the graph", op, t)
	}
	return nil
}

// SetF32 writes all of an f32 tensor's elements; len(v) must equal Elements.
func (t *Tensor) SetF32(v []float32) error {
	if err := t.wantType("set_f32", TypeF32); err != nil {
		return err
	}
	if int64(len(v)) != t.Elements() {
		return fmt.Errorf("ggml: set_f32: %d values for tensor %s of %d elements", len(v), t, t.Elements())
	}
	return t.SetF32At(0, v)
}

// SetF32At writes v into an f32 tensor starting at element index i.
func (t *Tensor) SetF32At(i int, v []float32) error {
	if err := t.wantType("set_f32", TypeF32); err != nil {
		return err
	}
	if err := t.dataCheck("set_f32", 4*i, 4*len(v)); err != nil {
		return err
	}
	if len(v) > 0 {
		t.ctx.lib.fn.backendTensorSet(t.h, unsafe.Pointer(&v[0]), uintptr(4*i), uintptr(4*len(v)))
	}
	return nil
}

// F32 reads all of an f32 tensor's elements.
func (t *Tensor) F32() ([]float32, error) {
	if err := t.wantType("get_f32", TypeF32); err != nil {
		return nil, err
	}
	out := make([]float32, t.Elements())
	return out, t.ReadF32At(0, out)
}

// ReadF32At reads len(dst) elements of an f32 tensor starting at element i.
func (t *Tensor) ReadF32At(i int, dst []float32) error {
	if err := t.wantType("get_f32", TypeF32); err != nil {
		return err
	}
	if err := t.dataCheck("get_f32", 4*i, 4*len(dst)); err != nil {
		return err
	}
	if len(dst) > 0 {
		t.ctx.lib.fn.backendTensorGet(t.h, unsafe.Pointer(&dst[0]), uintptr(4*i), uintptr(4*len(dst)))
	}
	return nil
}

// SetI32 writes all of an i32 tensor's elements.
func (t *Tensor) SetI32(v []int32) error {
	if err := t.wantType("set_i32", TypeI32); err != nil {
		return err
	}
	if int64(len(v)) != t.Elements() {
		return fmt.Errorf("ggml: set_i32: %d values for tensor %s of %d elements", len(v), t, t.Elements())
	}
	if err := t.dataCheck("set_i32", 0, 4*len(v)); err != nil {
		return err
	}
	if len(v) > 0 {
		t.ctx.lib.fn.backendTensorSet(t.h, unsafe.Pointer(&v[0]), 0, uintptr(4*len(v)))
	}
	return nil
}

// I32 reads all of an i32 tensor's elements.
func (t *Tensor) I32() ([]int32, error) {
	if err := t.wantType("get_i32", TypeI32); err != nil {
		return nil, err
	}
	out := make([]int32, t.Elements())
	if err := t.dataCheck("get_i32", 0, 4*len(out)); err != nil {
		return nil, err
	}
	if len(out) > 0 {
		t.ctx.lib.fn.backendTensorGet(t.h, unsafe.Pointer(&out[0]), 0, uintptr(4*len(out)))
	}
	return out, nil
}

// Zero sets every byte of the tensor's data to 0.
func (t *Tensor) Zero() error {
	n := t.Bytes()
	if err := t.dataCheck("memset", 0, n); err != nil {
		return err
	}
	t.ctx.lib.fn.backendTensorMemset(t.h, 0, 0, uintptr(n))
	return nil
}

// CopyTo copies t's data into dst (same type and byte size; any backends).
func (t *Tensor) CopyTo(dst *Tensor) error {
	if err := t.dataCheck("tensor_copy", 0, t.Bytes()); err != nil {
		return err
	}
	if err := dst.dataCheck("tensor_copy", 0, dst.Bytes()); err != nil {
		return err
	}
	if t.Type() != dst.Type() || t.Bytes() != dst.Bytes() || !t.Contiguous() || !dst.Contiguous() {
		return fmt.Errorf("ggml: tensor_copy: %s and %s differ in type or size, or are not contiguous", t, dst)
	}
	t.ctx.lib.fn.backendTensorCopy(t.h, dst.h)
	return nil
}
