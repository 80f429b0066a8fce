package ggml

import (
	"fmt"
)

// Graph is a compute graph built in a Context. Its memory belongs to the
// Context; Close only retires the handle (idempotent).
type Graph struct {
	ctx     *Context
	h       cGraph
	size    int
	closed  bool
	visited map[cTensor]struct{}
	nodes   int
	leafs   int
	// checkedDev is the device whose supports_op check the graph passed.
	checkedDev cDevice
	checkedN   int
	// allocGen/allocN: the buffer generation and node count at which every
	// tensor of the graph was last seen allocated in a live buffer.
	allocGen uint64
	allocN   int
	allocOK  bool
	allocFor *backendImpl
}

// NewGraph creates a graph of up to size nodes (0 = DefaultGraphSize). The
// context must have been created with room for it (ContextOptions.Graphs).
func (c *Context) NewGraph(size int) (*Graph, error) {
	if err := c.Err(); err != nil {
		return nil, err
	}
	if size <= 0 {
		size = DefaultGraphSize
	}
	need := c.lib.fn.graphOverheadCustom(uintptr(size), false)
	if c.lib.fn.usedMem(c.h)+need > c.lib.fn.getMemSize(c.h) {
		return nil, fmt.Errorf("ggml: new_graph: no room for a %d-node graph in the context; create it with ContextOptions{Graphs: n, GraphSize: %d}", size, size)
	}
	h := c.lib.fn.newGraphCustom(c.h, uintptr(size), false)
	if h == 0 {
		return nil, fmt.Errorf("ggml: new_graph: ggml returned no graph")
	}
	return &Graph{ctx: c, h: h, size: size, visited: map[cTensor]struct{}{}}, nil
}

func (g *Graph) usable() error {
	if g == nil || g.h == 0 {
		return fmt.Errorf("ggml: nil graph")
	}
	if g.closed {
		return fmt.Errorf("%w: graph", ErrClosed)
	}
	return g.ctx.Err()
}

// Expand adds t and every tensor it depends on to the graph
// (ggml_build_forward_expand). It fails, instead of letting ggml abort, when
// the graph would exceed its size or t is invalid.
func (g *Graph) Expand(t *Tensor) error {
	if err := g.usable(); err != nil {
		return err
	}
	if !t.Valid() {
		if err := t.ctx.Err(); err != nil {
			return err
		}
		return fmt.Errorf("ggml: expand: not a valid tensor")
	}
	// Count what ggml_visit_parents would add, before it asserts.
	added := map[cTensor]struct{}{}
	nodes, leafs := 0, 0
	stack := []cTensor{t.h}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if _, ok := g.visited[n]; ok {
			continue
		}
		if _, ok := added[n]; ok {
			continue
		}
		added[n] = struct{}{}
		if *(*int32)(cptr(n + offOp)) == 0 && *(*int32)(cptr(n + offOp + 4 + 64))&4 == 0 {
			leafs++
		} else {
			nodes++
		}
		for i := range maxSrc {
			if s := tensorSrc(n, i); s != 0 {
				stack = append(stack, s)
			}
		}
	}
	if g.nodes+nodes > g.size || g.leafs+leafs > g.size {
		return fmt.Errorf("ggml: expand: the graph would hold %d nodes and %d leafs, more than its size %d; create it with a larger size", g.nodes+nodes, g.leafs+leafs, g.size)
	}
	// The hash set holds 2*size slots; stay well inside it.
	if len(g.visited)+len(added) > 2*g.size {
		return fmt.Errorf("ggml: expand: %d tensors exceed the graph's hash capacity; create it with a larger size", len(g.visited)+len(added))
	}
	for n := range added {
		g.visited[n] = struct{}{}
	}
	g.nodes += nodes
	g.leafs += leafs
	g.ctx.lib.fn.buildForwardExpand(g.h, t.h)
	return nil
}

// Nodes is the number of op nodes in the graph.
func (g *Graph) Nodes() int {
	if g.usable() != nil {
		return 0
	}
	return int(g.ctx.lib.fn.graphNNodes(g.h))
}

// Close retires the graph; its memory is freed with its Context.
func (g *Graph) Close() error {
	if g != nil {
		g.closed = true
	}
	return nil
}

// Buffer is backend memory holding the data of a Context's tensors. One
// owner; Close is idempotent and makes the tensors' data unreachable.
type Buffer struct {
	lib    *Library
	h      cBuffer
	closed bool
}

// Alloc allocates every not-yet-allocated tensor of the context (inputs,
// weights and, if you built ops here, their results) in one buffer on the
// backend's device.
func (c *Context) Alloc(b *Backend) (*Buffer, error) {
	if err := c.Err(); err != nil {
		return nil, err
	}
	impl, err := b.get()
	if err != nil {
		return nil, err
	}
	impl.mu.Lock()
	defer impl.mu.Unlock()
	if impl.closed {
		return nil, fmt.Errorf("%w: backend %s", ErrClosed, impl.dev.Name)
	}
	for t := c.lib.fn.getFirstTensor(c.h); t != 0; t = c.lib.fn.getNextTensor(c.h, t) {
		buf := tensorBuffer(t)
		if buf == 0 && tensorViewSrc(t) != 0 {
			buf = tensorBuffer(tensorViewSrc(t))
		}
		if buf != 0 && !c.lib.isLive(buf) {
			return nil, fmt.Errorf("%w: ggml: alloc_ctx_tensors: tensor %q lives in a closed buffer", ErrClosed, goString(c.lib.fn.getName(t)))
		}
	}
	h := c.lib.fn.backendAllocCtxTensors(c.h, impl.h)
	if h == 0 {
		return nil, fmt.Errorf("ggml: alloc_ctx_tensors on %s failed: out of device memory, or the context has no unallocated tensors", b)
	}
	c.lib.addLive(h)
	c.lib.counts.buffers.Add(1)
	return &Buffer{lib: c.lib, h: h}, nil
}

// Size is the buffer's size in bytes.
func (b *Buffer) Size() int {
	if b == nil || b.closed {
		return 0
	}
	return int(b.lib.fn.backendBufferGetSize(b.h))
}

// Clear sets every byte of the buffer to value.
func (b *Buffer) Clear(value byte) error {
	if b == nil || b.closed {
		return fmt.Errorf("%w: buffer", ErrClosed)
	}
	b.lib.fn.backendBufferClear(b.h, value)
	return nil
}

// Close frees the buffer (idempotent).
func (b *Buffer) Close() error {
	if b == nil || b.closed {
		return nil
	}
	b.closed = true
	b.lib.dropLive(b.h)
	b.lib.fn.backendBufferFree(b.h)
	b.lib.counts.buffers.Add(-1)
	b.h = 0
	return nil
}

// Allocator places a graph's intermediate tensors in a reusable compute buffer
// on the backend's device (ggml_gallocr), reusing memory between nodes. One
// owner; Close is idempotent.
type Allocator struct {
	lib    *Library
	h      cGallocr
	closed bool
	owned  map[cBuffer]struct{}
}

// NewAllocator creates a graph allocator for the backend's default buffer type.
func (b *Backend) NewAllocator() (*Allocator, error) {
	impl, err := b.get()
	if err != nil {
		return nil, err
	}
	impl.mu.Lock()
	defer impl.mu.Unlock()
	if impl.closed {
		return nil, fmt.Errorf("%w: backend %s", ErrClosed, impl.dev.Name)
	}
	buft := impl.lib.fn.backendGetDefaultBufferType(impl.h)
	h := impl.lib.fn.gallocrNew(buft)
	if h == 0 {
		return nil, fmt.Errorf("ggml: gallocr_new failed on %s", b)
	}
	impl.lib.counts.allocators.Add(1)
	return &Allocator{lib: impl.lib, h: h, owned: map[cBuffer]struct{}{}}, nil
}

// Reserve sizes the compute buffer for the largest graph it will see, so
// later Alloc calls do not reallocate.
func (a *Allocator) Reserve(g *Graph) error {
	if a == nil || a.closed {
		return fmt.Errorf("%w: allocator", ErrClosed)
	}
	if err := g.usable(); err != nil {
		return err
	}
	if !a.lib.fn.gallocrReserve(a.h, g.h) {
		return fmt.Errorf("ggml: gallocr_reserve failed: out of device memory")
	}
	return nil
}

// Alloc assigns memory to every unallocated tensor of the graph (its inputs
// made in the graph's context and its op results). Tensors allocated by an
// earlier Alloc of this allocator become invalid when it must grow. The
// allocator reuses memory once a tensor's last consumer ran, inputs included:
// set every input before each Compute, and mark results you read with
// SetOutput so they are not overwritten.
func (a *Allocator) Alloc(g *Graph) error {
	if a == nil || a.closed {
		return fmt.Errorf("%w: allocator", ErrClosed)
	}
	if err := g.usable(); err != nil {
		return err
	}
	// Every tensor of the graph: the graph context's tensors, the nodes and
	// their sources (weights and state from other contexts).
	lib := a.lib
	all := map[cTensor]struct{}{}
	for t := lib.fn.getFirstTensor(g.ctx.h); t != 0; t = lib.fn.getNextTensor(g.ctx.h, t) {
		all[t] = struct{}{}
	}
	for i := range int(lib.fn.graphNNodes(g.h)) {
		n := lib.fn.graphNode(g.h, int32(i))
		all[n] = struct{}{}
		for s := range maxSrc {
			if src := tensorSrc(n, s); src != 0 {
				all[src] = struct{}{}
			}
		}
	}
	// Refuse tensors, or views of tensors, in freed buffers (ggml would
	// touch the freed memory), and note the tensors ggml_gallocr will place
	// itself: unallocated and not views. Their buffers are the allocator's.
	var placed []cTensor
	for t := range all {
		buf := tensorBuffer(t)
		if buf == 0 && tensorViewSrc(t) != 0 {
			buf = tensorBuffer(tensorViewSrc(t))
		}
		switch {
		case buf != 0 && !lib.isLive(buf):
			return fmt.Errorf("%w: ggml: alloc_graph: tensor %q lives in a closed buffer", ErrClosed, goString(lib.fn.getName(t)))
		case buf == 0 && tensorData(t) == 0 && tensorViewSrc(t) == 0:
			placed = append(placed, t)
		}
	}
	if !lib.fn.gallocrAllocGraph(a.h, g.h) {
		return fmt.Errorf("ggml: gallocr_alloc_graph failed: out of device memory")
	}
	if len(placed) == 0 {
		return nil
	}
	// Register the allocator's buffers, so data access through a tensor it
	// placed is checked against its lifetime; retire the ones it replaced.
	mine := map[cBuffer]struct{}{}
	for _, t := range placed {
		if buf := tensorBuffer(t); buf != 0 {
			mine[buf] = struct{}{}
		}
	}
	for buf := range a.owned {
		if _, still := mine[buf]; !still {
			lib.dropLive(buf)
		}
	}
	a.owned = mine
	for buf := range mine {
		lib.addLive(buf)
	}
	return nil
}

// Size is the compute buffer's size in bytes.
func (a *Allocator) Size() int {
	if a == nil || a.closed {
		return 0
	}
	return int(a.lib.fn.gallocrGetBufferSize(a.h, 0))
}

// Close frees the allocator and its compute buffer (idempotent).
func (a *Allocator) Close() error {
	if a == nil || a.closed {
		return nil
	}
	a.closed = true
	for buf := range a.owned {
		a.lib.dropLive(buf)
	}
	a.owned = nil
	a.lib.fn.gallocrFree(a.h)
	a.lib.counts.allocators.Add(-1)
	a.h = 0
	return nil
}

// Compute runs the graph on the backend and waits for it. Every tensor of
// the graph must be allocated in a live buffer; on a non-CPU backend every op
// must be supported by the device (checked once per graph).
func (b *Backend) Compute(g *Graph) error {
	impl, err := b.get()
	if err != nil {
		return err
	}
	if err := g.usable(); err != nil {
		return err
	}
	lib := impl.lib
	n := int(lib.fn.graphNNodes(g.h))
	if n == 0 {
		return fmt.Errorf("ggml: compute: the graph has no op nodes; Expand it with the result tensor")
	}
	impl.mu.Lock()
	defer impl.mu.Unlock()
	if impl.closed {
		return fmt.Errorf("%w: backend %s", ErrClosed, impl.dev.Name)
	}
	if err := impl.refreshLocked(); err != nil {
		return err
	}
	if gen := lib.generation(); !g.allocOK || g.allocGen != gen || g.allocN != n || g.allocFor != impl {
		g.allocOK = false
		usable := map[cBufType]bool{}
		bufs := map[cBuffer]struct{}{}
		check := func(t cTensor) error {
			if err := lib.allocated(t); err != nil {
				return err
			}
			bufs[tensorBuffer(t)] = struct{}{}
			buft := lib.fn.backendBufferGetType(tensorBuffer(t))
			ok, seen := usable[buft]
			if !seen {
				ok = lib.fn.backendSupportsBuft(impl.h, buft)
				usable[buft] = ok
			}
			if !ok {
				return fmt.Errorf("ggml: compute: tensor %q lives in a %s buffer, which %s cannot use; allocate it through a backend on the same device", goString(lib.fn.getName(t)), lib.fn.backendBuftName(buft), b)
			}
			return nil
		}
		for i := range n {
			node := lib.fn.graphNode(g.h, int32(i))
			if err := check(node); err != nil {
				return err
			}
			for s := range maxSrc {
				if src := tensorSrc(node, s); src != 0 {
					if err := check(src); err != nil {
						return err
					}
				}
			}
		}
		lib.noteUsed(impl, bufs)
		g.allocOK, g.allocGen, g.allocN, g.allocFor = true, gen, n, impl
	}
	if impl.dev.Type != "cpu" && (g.checkedDev != impl.dev.h || g.checkedN != n) {
		for i := range n {
			node := lib.fn.graphNode(g.h, int32(i))
			if !lib.fn.backendDevSupportsOp(impl.dev.h, node) {
				return fmt.Errorf("%w: compute: %s does not support op %s (node %q); use another backend or file an issue", ErrUnsupported, b, lib.fn.opDesc(node), goString(lib.fn.getName(node)))
			}
		}
		g.checkedDev, g.checkedN = impl.dev.h, n
	}
	if st := lib.fn.backendGraphCompute(impl.h, g.h); st != 0 {
		return fmt.Errorf("ggml: graph_compute on %s failed: %s (status %d)", b, lib.fn.statusToString(st), st)
	}
	return nil
}

func (l *Library) allocated(t cTensor) error {
	buf := tensorBuffer(t)
	if buf == 0 || tensorData(t) == 0 {
		return fmt.Errorf("ggml: compute: tensor %q (%s) has no memory; allocate its context (Context.Alloc) or the graph (Allocator.Alloc) first", goString(l.fn.getName(t)), l.fn.opDesc(t))
	}
	if !l.isLive(buf) {
		return fmt.Errorf("%w: ggml: compute: the buffer holding tensor %q was closed", ErrClosed, goString(l.fn.getName(t)))
	}
	return nil
}
