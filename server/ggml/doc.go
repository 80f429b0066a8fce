// Package ggml binds the ggml shared libraries through purego (no cgo): it
// opens the libraries from a folder, checks their version, lists devices and
// selects a compute backend, and wraps tensors, graphs and buffers so that Go
// code owns each of them exactly once.
//
// Typical use:
//
//	lib, err := ggml.Open(ggml.DefaultDir())
//	be, err := lib.NewBackend("cpu", 0, 1)
//	defer be.Close()
//	ctx, err := lib.NewContext(16)        // metadata only (no_alloc)
//	defer ctx.Close()
//	a := ctx.NewTensor1D(ggml.TypeF32, 4)
//	b := ctx.NewTensor1D(ggml.TypeF32, 4)
//	sum := ctx.Add(a, b)
//	g := ctx.NewGraph(0)
//	g.Expand(sum)
//	buf, err := ctx.Alloc(be)             // every tensor of ctx on the backend
//	defer buf.Close()
//	a.SetF32(...); b.SetF32(...)
//	err = be.Compute(g)
//	out, err := sum.F32()
//
// Ops record the first error in their Context (wrong shapes, a full context,
// a closed context) instead of letting ggml abort the process; the Context's
// Err, Graph.Expand and Backend.Compute report it.
package ggml
