package ggml

import "fmt"

// The ops check the shape rules that ggml enforces with GGML_ASSERT (which
// aborts the process) and record a Context error instead.

// NewTensor1D creates a tensor of shape [ne0].
func (c *Context) NewTensor1D(typ Type, ne0 int64) *Tensor {
	return c.newTensor("new_tensor_1d", typ, 1, ne0, 1, 1, 1)
}

// NewTensor2D creates a tensor of shape [ne0, ne1].
func (c *Context) NewTensor2D(typ Type, ne0, ne1 int64) *Tensor {
	return c.newTensor("new_tensor_2d", typ, 2, ne0, ne1, 1, 1)
}

// NewTensor3D creates a tensor of shape [ne0, ne1, ne2].
func (c *Context) NewTensor3D(typ Type, ne0, ne1, ne2 int64) *Tensor {
	return c.newTensor("new_tensor_3d", typ, 3, ne0, ne1, ne2, 1)
}

// NewTensor4D creates a tensor of shape [ne0, ne1, ne2, ne3].
func (c *Context) NewTensor4D(typ Type, ne0, ne1, ne2, ne3 int64) *Tensor {
	return c.newTensor("new_tensor_4d", typ, 4, ne0, ne1, ne2, ne3)
}

func (c *Context) newTensor(op string, typ Type, dims int, ne0, ne1, ne2, ne3 int64) *Tensor {
	if !c.begin(op, 1) {
		return &Tensor{ctx: c}
	}
	if ne0 < 0 || ne1 < 0 || ne2 < 0 || ne3 < 0 {
		return c.fail(op, "negative dimension in [%d %d %d %d]", ne0, ne1, ne2, ne3)
	}
	switch typ {
	case TypeF32, TypeF16, TypeI8, TypeI16, TypeI32, TypeI64, TypeF64, TypeBF16:
	case TypeQ8_0:
		if ne0%32 != 0 {
			return c.fail(op, "q8_0 rows need a multiple of 32 elements, got %d", ne0)
		}
	default:
		return c.fail(op, "unsupported tensor type %s", typ)
	}
	t := int32(typ)
	var h cTensor
	switch dims {
	case 1:
		h = c.lib.fn.newTensor1D(c.h, t, ne0)
	case 2:
		h = c.lib.fn.newTensor2D(c.h, t, ne0, ne1)
	case 3:
		h = c.lib.fn.newTensor3D(c.h, t, ne0, ne1, ne2)
	default:
		h = c.lib.fn.newTensor4D(c.h, t, ne0, ne1, ne2, ne3)
	}
	return c.wrap(op, h)
}

func shapeStr(ne [4]int64) string { return fmt.Sprintf("[%d %d %d %d]", ne[0], ne[1], ne[2], ne[3]) }

// canRepeat is ggml_can_repeat(b, a): b broadcasts to a's shape.
func canRepeat(b, a [4]int64) bool {
	for i := range 4 {
		if b[i] == 0 {
			if a[i] != 0 {
				return false
			}
			continue
		}
		if a[i]%b[i] != 0 {
			return false
		}
	}
	return true
}

// isFloat reports whether the CPU kernels take t's type for arithmetic.
func isFloat(t *Tensor) bool {
	switch t.Type() {
	case TypeF32, TypeF16, TypeBF16:
		return true
	}
	return false
}

// rowsOK checks the CPU kernels' common requirement: a float tensor whose
// elements along ne0 are adjacent (any view made by Transpose or Permute that
// moves dimension 0 needs Cont first).
func (c *Context) rowsOK(op string, ts ...*Tensor) bool {
	for _, t := range ts {
		if !isFloat(t) {
			c.fail(op, "%s has type %s; this op takes f32, f16 or bf16", t, t.Type())
			return false
		}
		// The kernels assert nb0 == the element size, even when ne0 == 1.
		if t.Strides()[0] != uint64(t.elemSize()) {
			c.fail(op, "%s has strided rows (nb0=%d); Cont it first", t, t.Strides()[0])
			return false
		}
	}
	return true
}

// wantF32 checks that every tensor is f32.
func (c *Context) wantF32(op string, ts ...*Tensor) bool {
	for _, t := range ts {
		if t.Type() != TypeF32 {
			c.fail(op, "%s has type %s; this op takes f32", t, t.Type())
			return false
		}
	}
	return true
}

func (c *Context) binaryBroadcast(op string, fn binaryFn, a, b *Tensor) *Tensor {
	if !c.begin(op, 1, a, b) {
		return &Tensor{ctx: c}
	}
	if !c.rowsOK(op, a) {
		return &Tensor{ctx: c}
	}
	// The CPU kernels take b of a's type, or f32.
	if b.Type() != a.Type() && b.Type() != TypeF32 {
		return c.fail(op, "%s (%s) and %s (%s): b must be f32 or a's type", a, a.Type(), b, b.Type())
	}
	if !canRepeat(b.Shape(), a.Shape()) {
		return c.fail(op, "%s cannot broadcast to %s", shapeStr(b.Shape()), shapeStr(a.Shape()))
	}
	return c.wrap(op, fn(c.h, a.h, b.h))
}

// Add is a + b; b broadcasts to a's shape.
func (c *Context) Add(a, b *Tensor) *Tensor { return c.binaryBroadcast("add", c.lib.fn.add, a, b) }

// Sub is a - b; b broadcasts to a's shape.
func (c *Context) Sub(a, b *Tensor) *Tensor { return c.binaryBroadcast("sub", c.lib.fn.sub, a, b) }

// Mul is a * b elementwise; b broadcasts to a's shape.
func (c *Context) Mul(a, b *Tensor) *Tensor { return c.binaryBroadcast("mul", c.lib.fn.mul, a, b) }

// Div is a / b elementwise; b broadcasts to a's shape.
func (c *Context) Div(a, b *Tensor) *Tensor { return c.binaryBroadcast("div", c.lib.fn.div, a, b) }

// Repeat tiles a to b's shape.
func (c *Context) Repeat(a, b *Tensor) *Tensor {
	if !c.begin("repeat", 1, a, b) {
		return &Tensor{ctx: c}
	}
	if !canRepeat(a.Shape(), b.Shape()) {
		return c.fail("repeat", "%s cannot repeat to %s", shapeStr(a.Shape()), shapeStr(b.Shape()))
	}
	if !c.rowsOK("repeat", a) {
		return &Tensor{ctx: c}
	}
	return c.wrap("repeat", c.lib.fn.repeat(c.h, a.h, b.h))
}

// MulMat is ggml_mul_mat: with a [K, M, ...] and b [K, N, ...] the result is
// [M, N, ...] = b · aᵀ per batch (a's batch dims broadcast over b's).
func (c *Context) MulMat(a, b *Tensor) *Tensor {
	if !c.begin("mul_mat", 1, a, b) {
		return &Tensor{ctx: c}
	}
	an, bn := a.Shape(), b.Shape()
	if an[0] != bn[0] || an[2] == 0 || an[3] == 0 || bn[2]%an[2] != 0 || bn[3]%an[3] != 0 {
		return c.fail("mul_mat", "shapes %s and %s do not multiply (need equal ne0 and b's ne2, ne3 multiples of a's)", shapeStr(an), shapeStr(bn))
	}
	switch a.Type() {
	case TypeF32, TypeF16, TypeBF16, TypeQ8_0:
	default:
		return c.fail("mul_mat", "a %s has type %s; mul_mat takes f32, f16, bf16 or q8_0 weights", a, a.Type())
	}
	if c.lib.fn.isTransposed(a.h) {
		return c.fail("mul_mat", "a %s is transposed; make it contiguous with Cont first", a)
	}
	if a.Strides()[0] != uint64(a.elemSize()) {
		return c.fail("mul_mat", "a %s has strided rows; Cont it first", a)
	}
	if !c.rowsOK("mul_mat", b) || !c.wantF32("mul_mat", b) {
		return &Tensor{ctx: c}
	}
	return c.wrap("mul_mat", c.lib.fn.mulMat(c.h, a.h, b.h))
}

func (c *Context) unary(op string, fn unaryFn, a *Tensor) *Tensor {
	if !c.begin(op, 1, a) {
		return &Tensor{ctx: c}
	}
	if !c.rowsOK(op, a) {
		return &Tensor{ctx: c}
	}
	return c.wrap(op, fn(c.h, a.h))
}

// Relu is max(a, 0).
func (c *Context) Relu(a *Tensor) *Tensor { return c.unary("relu", c.lib.fn.relu, a) }

// Sigmoid is 1/(1+exp(-a)).
func (c *Context) Sigmoid(a *Tensor) *Tensor { return c.unary("sigmoid", c.lib.fn.sigmoid, a) }

// Tanh is tanh(a).
func (c *Context) Tanh(a *Tensor) *Tensor { return c.unary("tanh", c.lib.fn.tanh, a) }

// Sqrt is sqrt(a).
func (c *Context) Sqrt(a *Tensor) *Tensor { return c.unary("sqrt", c.lib.fn.sqrt, a) }

// Sqr is a*a.
func (c *Context) Sqr(a *Tensor) *Tensor { return c.unary("sqr", c.lib.fn.sqr, a) }

// Abs is |a|.
func (c *Context) Abs(a *Tensor) *Tensor { return c.unary("abs", c.lib.fn.abs, a) }

// Exp is exp(a).
func (c *Context) Exp(a *Tensor) *Tensor { return c.unary("exp", c.lib.fn.exp, a) }

// Log is ln(a).
func (c *Context) Log(a *Tensor) *Tensor { return c.unary("log", c.lib.fn.log, a) }

// Neg is -a.
func (c *Context) Neg(a *Tensor) *Tensor { return c.unary("neg", c.lib.fn.neg, a) }

// SumRows sums f32 a along ne0: [n, ...] -> [1, ...].
func (c *Context) SumRows(a *Tensor) *Tensor {
	if !c.begin("sum_rows", 1, a) || !c.rowsOK("sum_rows", a) || !c.wantF32("sum_rows", a) {
		return &Tensor{ctx: c}
	}
	return c.wrap("sum_rows", c.lib.fn.sumRows(c.h, a.h))
}

// Cont copies a (a view, permutation or transpose) into a contiguous tensor.
func (c *Context) Cont(a *Tensor) *Tensor {
	if !c.begin("cont", 1, a) {
		return &Tensor{ctx: c}
	}
	return c.wrap("cont", c.lib.fn.cont(c.h, a.h))
}

// Transpose swaps ne0 and ne1 (a view; Cont it before MulMat's first argument).
func (c *Context) Transpose(a *Tensor) *Tensor {
	if !c.begin("transpose", 1, a) {
		return &Tensor{ctx: c}
	}
	return c.wrap("transpose", c.lib.fn.transpose(c.h, a.h))
}

// Scale is a * s (a contiguous f32 tensor).
func (c *Context) Scale(a *Tensor, s float32) *Tensor {
	if !c.begin("scale", 1, a) || !c.wholeF32("scale", a) {
		return &Tensor{ctx: c}
	}
	return c.wrap("scale", c.lib.fn.scale(c.h, a.h, s))
}

// wholeF32 checks for a contiguous f32 tensor.
func (c *Context) wholeF32(op string, a *Tensor) bool {
	if !c.wantF32(op, a) {
		return false
	}
	// ggml_is_padded_1d, which ggml asserts: stricter than contiguity for
	// views with size-1 dimensions.
	ne, nb := a.Shape(), a.Strides()
	if !a.Contiguous() || nb[0] != 4 || nb[2] != nb[1]*uint64(ne[1]) || nb[3] != nb[2]*uint64(ne[2]) {
		c.fail(op, "%s is not contiguous; Cont it first", a)
		return false
	}
	return true
}

// ScaleBias is a * s + b (a contiguous f32 tensor).
func (c *Context) ScaleBias(a *Tensor, s, b float32) *Tensor {
	if !c.begin("scale_bias", 1, a) || !c.wholeF32("scale_bias", a) {
		return &Tensor{ctx: c}
	}
	return c.wrap("scale_bias", c.lib.fn.scaleBias(c.h, a.h, s, b))
}

// Clamp limits a to [lo, hi].
func (c *Context) Clamp(a *Tensor, lo, hi float32) *Tensor {
	if !c.begin("clamp", 1, a) {
		return &Tensor{ctx: c}
	}
	if lo > hi {
		return c.fail("clamp", "min %g is above max %g", lo, hi)
	}
	if !c.rowsOK("clamp", a) {
		return &Tensor{ctx: c}
	}
	return c.wrap("clamp", c.lib.fn.clamp(c.h, a.h, lo, hi))
}

// Cpy copies a into b (same number of elements; converts types) and returns
// the result node, a view of b.
func (c *Context) Cpy(a, b *Tensor) *Tensor {
	if !c.begin("cpy", 1, a, b) {
		return &Tensor{ctx: c}
	}
	if a.Elements() != b.Elements() {
		return c.fail("cpy", "%s has %d elements, %s has %d", a, a.Elements(), b, b.Elements())
	}
	if !cpyConverts(a.Type(), b.Type()) {
		return c.fail("cpy", "ggml cannot convert %s to %s", a.Type(), b.Type())
	}
	return c.wrap("cpy", c.lib.fn.cpy(c.h, a.h, b.h))
}

// Concat joins a and b along dim (0..3); the other dimensions must match.
func (c *Context) Concat(a, b *Tensor, dim int) *Tensor {
	if !c.begin("concat", 1, a, b) {
		return &Tensor{ctx: c}
	}
	if dim < 0 || dim > 3 {
		return c.fail("concat", "dim %d is not 0..3", dim)
	}
	if a.Type() != b.Type() {
		return c.fail("concat", "types %s and %s differ", a.Type(), b.Type())
	}
	an, bn := a.Shape(), b.Shape()
	for d := range 4 {
		if d != dim && an[d] != bn[d] {
			return c.fail("concat", "shapes %s and %s differ outside dim %d", shapeStr(an), shapeStr(bn), dim)
		}
	}
	return c.wrap("concat", c.lib.fn.concat(c.h, a.h, b.h, int32(dim)))
}

// GetRows gathers rows of a ([n, rows, d2, d3]) by the i32 indices in b
// ([k, d2, d3]); the result is [n, k, d2, d3]. The indices must lie in
// [0, rows) when the graph runs: ggml aborts the process on one outside.
func (c *Context) GetRows(a, b *Tensor) *Tensor {
	if !c.begin("get_rows", 1, a, b) {
		return &Tensor{ctx: c}
	}
	an, bn := a.Shape(), b.Shape()
	if b.Type() != TypeI32 {
		return c.fail("get_rows", "indices %s must be i32", b)
	}
	if an[2] != bn[1] || an[3] != bn[2] || bn[3] != 1 {
		return c.fail("get_rows", "data %s and indices %s do not match (need a.ne2 == b.ne1, a.ne3 == b.ne2, b.ne3 == 1)", shapeStr(an), shapeStr(bn))
	}
	return c.wrap("get_rows", c.lib.fn.getRows(c.h, a.h, b.h))
}

// Reshape1D views a contiguous tensor as [ne0].
func (c *Context) Reshape1D(a *Tensor, ne0 int64) *Tensor {
	return c.reshape(a, 1, [4]int64{ne0, 1, 1, 1})
}

// Reshape2D views a contiguous tensor as [ne0, ne1].
func (c *Context) Reshape2D(a *Tensor, ne0, ne1 int64) *Tensor {
	return c.reshape(a, 2, [4]int64{ne0, ne1, 1, 1})
}

// Reshape3D views a contiguous tensor as [ne0, ne1, ne2].
func (c *Context) Reshape3D(a *Tensor, ne0, ne1, ne2 int64) *Tensor {
	return c.reshape(a, 3, [4]int64{ne0, ne1, ne2, 1})
}

// Reshape4D views a contiguous tensor as [ne0, ne1, ne2, ne3].
func (c *Context) Reshape4D(a *Tensor, ne0, ne1, ne2, ne3 int64) *Tensor {
	return c.reshape(a, 4, [4]int64{ne0, ne1, ne2, ne3})
}

func (c *Context) reshape(a *Tensor, dims int, ne [4]int64) *Tensor {
	op := fmt.Sprintf("reshape_%dd", dims)
	if !c.begin(op, 1, a) {
		return &Tensor{ctx: c}
	}
	if !a.Contiguous() {
		return c.fail(op, "%s is not contiguous; Cont it first", a)
	}
	if ne[0]*ne[1]*ne[2]*ne[3] != a.Elements() {
		return c.fail(op, "%s has %d elements, shape %s has %d", a, a.Elements(), shapeStr(ne), ne[0]*ne[1]*ne[2]*ne[3])
	}
	var h cTensor
	switch dims {
	case 1:
		h = c.lib.fn.reshape1D(c.h, a.h, ne[0])
	case 2:
		h = c.lib.fn.reshape2D(c.h, a.h, ne[0], ne[1])
	case 3:
		h = c.lib.fn.reshape3D(c.h, a.h, ne[0], ne[1], ne[2])
	default:
		h = c.lib.fn.reshape4D(c.h, a.h, ne[0], ne[1], ne[2], ne[3])
	}
	return c.wrap(op, h)
}

// viewCheck verifies that a view of shape ne with byte strides nb (nb[0] the
// element size) at offset stays inside a's data.
func (c *Context) viewCheck(op string, a *Tensor, ne [4]int64, nb [4]uint64, offset uint64) bool {
	for _, n := range ne {
		if n <= 0 {
			c.fail(op, "view shape %s has a non-positive dimension", shapeStr(ne))
			return false
		}
	}
	last := offset + nb[0]
	for i := range 4 {
		last += uint64(ne[i]-1) * nb[i]
	}
	// A view of a view may address its source's data beyond its own extent;
	// check against the whole underlying tensor.
	base := a.h
	baseOff := uint64(0)
	if vs := tensorViewSrc(a.h); vs != 0 {
		base = vs
		baseOff = uint64(*(*uintptr)(cptr(a.h + offViewSrc + 8)))
	}
	size := uint64(c.lib.fn.nbytes(base))
	if baseOff+last > size {
		c.fail(op, "view %s at byte offset %d reaches byte %d of %s, which has %d bytes", shapeStr(ne), offset, baseOff+last, a, size)
		return false
	}
	// ggml also asserts that the view, sized as if it were contiguous,
	// fits: overlapping strided views (frames with a hop) can fail this.
	var row uint64
	if a.Type() == TypeQ8_0 {
		row = uint64(ne[0]/32) * 34
	} else {
		row = uint64(ne[0]) * uint64(a.elemSize())
	}
	if dense := row * uint64(ne[1]*ne[2]*ne[3]); baseOff+offset+dense > size {
		c.fail(op, "view %s at byte offset %d: ggml sizes it as %d contiguous bytes, past the %d bytes of %s; use smaller views (e.g. one 2-D view per frame)", shapeStr(ne), offset, dense, size, a)
		return false
	}
	return true
}

// View1D is a view of ne0 elements of a starting at byte offset.
func (c *Context) View1D(a *Tensor, ne0 int64, offset uint64) *Tensor {
	if !c.begin("view_1d", 1, a) {
		return &Tensor{ctx: c}
	}
	es := a.Strides()[0]
	if !c.viewCheck("view_1d", a, [4]int64{ne0, 1, 1, 1}, [4]uint64{es, 0, 0, 0}, offset) {
		return &Tensor{ctx: c}
	}
	return c.wrap("view_1d", c.lib.fn.view1D(c.h, a.h, ne0, uintptr(offset)))
}

// View2D is a [ne0, ne1] view of a with row stride nb1 bytes at byte offset.
func (c *Context) View2D(a *Tensor, ne0, ne1 int64, nb1, offset uint64) *Tensor {
	if !c.begin("view_2d", 1, a) {
		return &Tensor{ctx: c}
	}
	es := a.Strides()[0]
	if !c.viewCheck("view_2d", a, [4]int64{ne0, ne1, 1, 1}, [4]uint64{es, nb1, 0, 0}, offset) {
		return &Tensor{ctx: c}
	}
	return c.wrap("view_2d", c.lib.fn.view2D(c.h, a.h, ne0, ne1, uintptr(nb1), uintptr(offset)))
}

// View3D is a [ne0, ne1, ne2] view of a with strides nb1, nb2 bytes at byte offset.
func (c *Context) View3D(a *Tensor, ne0, ne1, ne2 int64, nb1, nb2, offset uint64) *Tensor {
	if !c.begin("view_3d", 1, a) {
		return &Tensor{ctx: c}
	}
	es := a.Strides()[0]
	if !c.viewCheck("view_3d", a, [4]int64{ne0, ne1, ne2, 1}, [4]uint64{es, nb1, nb2, 0}, offset) {
		return &Tensor{ctx: c}
	}
	return c.wrap("view_3d", c.lib.fn.view3D(c.h, a.h, ne0, ne1, ne2, uintptr(nb1), uintptr(nb2), uintptr(offset)))
}

// View4D is a [ne0, ne1, ne2, ne3] view of a with strides nb1..nb3 bytes at byte offset.
func (c *Context) View4D(a *Tensor, ne0, ne1, ne2, ne3 int64, nb1, nb2, nb3, offset uint64) *Tensor {
	if !c.begin("view_4d", 1, a) {
		return &Tensor{ctx: c}
	}
	es := a.Strides()[0]
	if !c.viewCheck("view_4d", a, [4]int64{ne0, ne1, ne2, ne3}, [4]uint64{es, nb1, nb2, nb3}, offset) {
		return &Tensor{ctx: c}
	}
	return c.wrap("view_4d", c.lib.fn.view4D(c.h, a.h, ne0, ne1, ne2, ne3, uintptr(nb1), uintptr(nb2), uintptr(nb3), uintptr(offset)))
}

// Permute moves dimension i of a to position axes[i] (ggml_permute); the
// result is a view, Cont it for ops that need contiguous data.
func (c *Context) Permute(a *Tensor, ax0, ax1, ax2, ax3 int) *Tensor {
	if !c.begin("permute", 1, a) {
		return &Tensor{ctx: c}
	}
	seen := [4]bool{}
	for _, ax := range []int{ax0, ax1, ax2, ax3} {
		if ax < 0 || ax > 3 || seen[ax] {
			return c.fail("permute", "axes (%d, %d, %d, %d) are not a permutation of 0..3", ax0, ax1, ax2, ax3)
		}
		seen[ax] = true
	}
	return c.wrap("permute", c.lib.fn.permute(c.h, a.h, int32(ax0), int32(ax1), int32(ax2), int32(ax3)))
}

// Conv1D convolves data b [L, Cin, N] with kernel a [K, Cin, Cout] (stride s,
// zero padding p each side, dilation d) into [Lout, Cout, N]. Unlike
// ggml_conv_1d, whose im2col is f16, it unfolds in f32 (im2col + mul_mat),
// so an f32 model keeps f32 accuracy. The kernel must be contiguous.
func (c *Context) Conv1D(a, b *Tensor, s, p, d int) *Tensor {
	if !c.begin("conv_1d", 8, a, b) {
		return &Tensor{ctx: c}
	}
	an, bn := a.Shape(), b.Shape()
	if s <= 0 || d <= 0 || p < 0 {
		return c.fail("conv_1d", "stride %d, padding %d, dilation %d: stride and dilation must be positive, padding non-negative", s, p, d)
	}
	if an[1] != bn[1] || bn[3] != 1 || an[3] != 1 {
		return c.fail("conv_1d", "kernel %s and data %s do not match (need kernel [K, Cin, Cout], data [L, Cin, N])", shapeStr(an), shapeStr(bn))
	}
	lout := (bn[0]+2*int64(p)-int64(d)*(an[0]-1)-1)/int64(s) + 1
	if lout <= 0 {
		return c.fail("conv_1d", "data length %d is too short for kernel %d (padding %d, dilation %d)", bn[0], an[0], p, d)
	}
	if !a.Contiguous() {
		return c.fail("conv_1d", "kernel %s is not contiguous; Cont it first", a)
	}
	if a.Type() != TypeF32 && a.Type() != TypeF16 {
		return c.fail("conv_1d", "kernel %s has type %s; conv_1d takes f32 or f16 kernels", a, a.Type())
	}
	k, cout, n := an[0]*an[1], an[2], bn[2]
	cols := c.Im2Col1D(a, b, s, p, d, TypeF32) // [K*Cin, Lout, N]
	cols2 := c.Reshape2D(cols, k, lout*n)      // [K*Cin, Lout*N]
	kern := c.Reshape2D(a, k, cout)            // [K*Cin, Cout]
	if a.Type() == TypeF32 {
		out := c.MulMat(cols2, kern) // [Lout*N, Cout]
		if n == 1 {
			return c.Reshape3D(out, lout, cout, 1)
		}
		return c.Cont(c.Permute(c.Reshape3D(out, lout, n, cout), 0, 2, 1, 3))
	}
	out := c.MulMat(kern, cols2) // [Cout, Lout*N]
	return c.Cont(c.Permute(c.Reshape3D(out, cout, lout, n), 1, 0, 2, 3))
}

// Im2Col1D unfolds data b [L, Cin, N] for kernel a [K, Cin, ...] into
// [K*Cin, Lout, N] (type dst), the first half of a 1-D convolution.
func (c *Context) Im2Col1D(a, b *Tensor, s, p, d int, dst Type) *Tensor {
	if !c.begin("im2col", 1, a, b) {
		return &Tensor{ctx: c}
	}
	an, bn := a.Shape(), b.Shape()
	if s <= 0 || d <= 0 || p < 0 {
		return c.fail("im2col", "stride %d, padding %d, dilation %d: stride and dilation must be positive, padding non-negative", s, p, d)
	}
	if an[1] != bn[1] || bn[3] != 1 {
		return c.fail("im2col", "kernel %s and data %s do not match", shapeStr(an), shapeStr(bn))
	}
	if out := (bn[0]+2*int64(p)-int64(d)*(an[0]-1)-1)/int64(s) + 1; out <= 0 {
		return c.fail("im2col", "data length %d is too short for kernel %d", bn[0], an[0])
	}
	if dst != TypeF32 && dst != TypeF16 {
		return c.fail("im2col", "destination type %s is not f32 or f16", dst)
	}
	if !c.wantF32("im2col", b) || !c.rowsOK("im2col", b) {
		return &Tensor{ctx: c}
	}
	return c.wrap("im2col", c.lib.fn.im2col(c.h, a.h, b.h, int32(s), 0, int32(p), 0, int32(d), 0, false, int32(dst)))
}

// Pad appends p0..p3 zeros at the end of each dimension.
func (c *Context) Pad(a *Tensor, p0, p1, p2, p3 int) *Tensor {
	return c.PadExt(a, 0, p0, 0, p1, 0, p2, 0, p3)
}

// PadExt pads each dimension with zeros: lpN before and rpN after.
func (c *Context) PadExt(a *Tensor, lp0, rp0, lp1, rp1, lp2, rp2, lp3, rp3 int) *Tensor {
	if !c.begin("pad", 1, a) {
		return &Tensor{ctx: c}
	}
	for _, v := range []int{lp0, rp0, lp1, rp1, lp2, rp2, lp3, rp3} {
		if v < 0 {
			return c.fail("pad", "negative padding %d", v)
		}
	}
	if !c.wantF32("pad", a) {
		return &Tensor{ctx: c}
	}
	return c.wrap("pad", c.lib.fn.padExt(c.h, a.h, int32(lp0), int32(rp0), int32(lp1), int32(rp1), int32(lp2), int32(rp2), int32(lp3), int32(rp3)))
}

// PadReflect1D pads ne0 by reflection: p0 before, p1 after (each less than ne0).
func (c *Context) PadReflect1D(a *Tensor, p0, p1 int) *Tensor {
	if !c.begin("pad_reflect_1d", 1, a) {
		return &Tensor{ctx: c}
	}
	ne := a.Shape()
	if p0 < 0 || p1 < 0 || int64(p0) >= ne[0] || int64(p1) >= ne[0] {
		return c.fail("pad_reflect_1d", "padding (%d, %d) must be non-negative and below ne0=%d", p0, p1, ne[0])
	}
	if a.Type() != TypeF32 || !a.Contiguous() {
		return c.fail("pad_reflect_1d", "%s must be a contiguous f32 tensor", a)
	}
	return c.wrap("pad_reflect_1d", c.lib.fn.padReflect1D(c.h, a.h, int32(p0), int32(p1)))
}

// cpyConverts lists the conversions the CPU kernels implement (ggml_dup).
func cpyConverts(from, to Type) bool {
	isF := func(t Type) bool { return t == TypeF32 || t == TypeF16 || t == TypeBF16 }
	switch {
	case from == to:
		return true
	case isF(from) && isF(to):
		return true
	case from == TypeF32 && to == TypeI32, from == TypeI32 && to == TypeF32:
		return true
	case from == TypeQ8_0 && to == TypeF32:
		return true
	}
	return false
}

// elemSize is the byte size of one element (0 for block-quantized types).
func (t *Tensor) elemSize() int {
	switch t.Type() {
	case TypeF32, TypeI32:
		return 4
	case TypeF16, TypeBF16, TypeI16:
		return 2
	case TypeI8:
		return 1
	case TypeI64, TypeF64:
		return 8
	}
	return 0
}

// SetPrecF32 asks the backend to compute the MulMat result t entirely in f32
// (ggml_mul_mat_set_prec with GGML_PREC_F32); some backends otherwise use f16
// internally. t must be the result of MulMat.
func (t *Tensor) SetPrecF32() *Tensor {
	if !t.Valid() {
		return t
	}
	if d := t.ctx.lib.fn.opDesc(t.h); d != "MUL_MAT" {
		t.ctx.fail("mul_mat_set_prec", "%s is a %s node, not MUL_MAT", t, d)
		return t
	}
	const precF32 = 10 // GGML_PREC_F32
	t.ctx.lib.fn.mulMatSetPrec(t.h, precF32)
	return t
}
