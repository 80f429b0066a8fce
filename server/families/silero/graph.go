package silero

import (
	"errors"
	"fmt"

	"github.com/audioproof/audioproof/server/families/silero/vad"
	"github.com/audioproof/audioproof/server/ggml"
)

// maxBlock is the most chunks one graph processes (8.2 s of audio). Longer
// inputs run several blocks; a session caches one graph per power-of-two
// block size, so at most log2(maxBlock)+1 graphs.
const maxBlock = 128

// padded is the STFT input per chunk: context + chunk + reflection padding.
const padded = vad.WindowSize + vad.PadRight

// model holds the weights as ggml tensors in one backend buffer.
type model struct {
	ctx *ggml.Context
	buf *ggml.Buffer

	basis *ggml.Tensor    // [256, 258]
	encW  [4]*ggml.Tensor // [3*In, Out]
	encB  [4]*ggml.Tensor // [Out]
	wih   *ggml.Tensor    // [128, 512]
	whh   *ggml.Tensor    // [128, 512]
	bias  *ggml.Tensor    // [512] = b_ih + b_hh
	decW  *ggml.Tensor    // [128, 1]
	decB  *ggml.Tensor    // [1]
	layer [4]vad.EncoderLayer
}

func uploadWeights(be *ggml.Backend, w *vad.Weights) (*model, error) {
	ctx, err := be.Library().NewContextWith(ggml.ContextOptions{Tensors: 32})
	if err != nil {
		return nil, err
	}
	m := &model{ctx: ctx}
	m.basis = ctx.NewTensor2D(ggml.TypeF32, vad.FilterLen, 2*vad.Bins).SetName("stft.basis")
	for i, l := range w.Encoder {
		m.layer[i] = l
		m.encW[i] = ctx.NewTensor2D(ggml.TypeF32, int64(3*l.In), int64(l.Out)).SetName(fmt.Sprintf("enc.%d.w", i))
		m.encB[i] = ctx.NewTensor1D(ggml.TypeF32, int64(l.Out)).SetName(fmt.Sprintf("enc.%d.b", i))
	}
	m.wih = ctx.NewTensor2D(ggml.TypeF32, vad.Hidden, 4*vad.Hidden).SetName("lstm.w_ih")
	m.whh = ctx.NewTensor2D(ggml.TypeF32, vad.Hidden, 4*vad.Hidden).SetName("lstm.w_hh")
	m.bias = ctx.NewTensor1D(ggml.TypeF32, 4*vad.Hidden).SetName("lstm.bias")
	m.decW = ctx.NewTensor2D(ggml.TypeF32, vad.Hidden, 1).SetName("dec.w")
	m.decB = ctx.NewTensor1D(ggml.TypeF32, 1).SetName("dec.b")
	if err := ctx.Err(); err != nil {
		ctx.Close()
		return nil, err
	}
	m.buf, err = ctx.Alloc(be)
	if err != nil {
		ctx.Close()
		return nil, err
	}
	bias := make([]float32, 4*vad.Hidden)
	for i := range bias {
		bias[i] = w.BIH[i] + w.BHH[i]
	}
	sets := []struct {
		t *ggml.Tensor
		v []float32
	}{
		{m.basis, w.Basis}, {m.wih, w.WIH}, {m.whh, w.WHH}, {m.bias, bias}, {m.decW, w.DecW}, {m.decB, []float32{w.DecB}},
	}
	for i, l := range w.Encoder {
		sets = append(sets, struct {
			t *ggml.Tensor
			v []float32
		}{m.encW[i], l.W}, struct {
			t *ggml.Tensor
			v []float32
		}{m.encB[i], l.B})
	}
	for _, s := range sets {
		if err := s.t.SetF32(s.v); err != nil {
			m.close()
			return nil, err
		}
	}
	return m, nil
}

func (m *model) close() error {
	err := m.buf.Close()
	return errors.Join(err, m.ctx.Close())
}

// block is one cached graph for n chunks.
type block struct {
	n     int
	ctx   *ggml.Context
	graph *ggml.Graph
	alloc *ggml.Allocator
	in    *ggml.Tensor // [padded, n]: each chunk's STFT input
	probs *ggml.Tensor // [1, n]
}

func (b *block) close() error {
	var err error
	if b.alloc != nil {
		err = b.alloc.Close()
	}
	return errors.Join(err, b.ctx.Close())
}

// buildBlock builds and allocates the graph for n chunks on be, reading and
// updating the LSTM state tensors h and c.
func buildBlock(be *ggml.Backend, m *model, h, c *ggml.Tensor, n int) (*block, error) {
	size := 20*n + 256
	ctx, err := be.Library().NewContextWith(ggml.ContextOptions{Tensors: size, Graphs: 1, GraphSize: size})
	if err != nil {
		return nil, err
	}
	b := &block{n: n, ctx: ctx}
	fail := func(err error) (*block, error) {
		b.close()
		return nil, err
	}
	g, err := ctx.NewGraph(size)
	if err != nil {
		return fail(err)
	}
	b.graph = g
	N := int64(n)
	const f32 = 4

	// STFT: overlapping frames of 256 every 128 samples (a strided view),
	// the real/imaginary basis as one matrix product, then the magnitude.
	b.in = ctx.NewTensor2D(ggml.TypeF32, padded, N).SetName("input").SetInput()
	// Frame t of every chunk is a [256, N] view with the chunk stride; the
	// frames are stacked t-major: column t*N + chunk.
	var frames *ggml.Tensor
	for t := 0; t < vad.Frames; t++ {
		f := ctx.Cont(ctx.View2D(b.in, vad.FilterLen, N, padded*f32, uint64(t*vad.HopLen*f32)))
		if frames == nil {
			frames = f
		} else {
			frames = ctx.Concat(frames, f, 1)
		}
	}
	spec := ctx.MulMat(m.basis, frames) // [258, 4N]
	re := ctx.View2D(spec, vad.Bins, vad.Frames*N, 2*vad.Bins*f32, 0)
	im := ctx.View2D(spec, vad.Bins, vad.Frames*N, 2*vad.Bins*f32, vad.Bins*f32)
	x := ctx.Sqrt(ctx.Add(ctx.Mul(re, re), ctx.Mul(im, im))) // [129, N, 4]: channel, chunk, frame

	// Encoder: conv1d(k=3, pad=1) as im2col + matrix product, per chunk.
	T := int64(vad.Frames)
	for i, l := range m.layer {
		// To [T, C, N] for im2col: from the STFT's [C, N, T], then from
		// the previous layer's [C, T, N].
		var xt *ggml.Tensor
		if i == 0 {
			xt = ctx.Cont(ctx.Permute(ctx.Reshape3D(x, int64(l.In), N, T), 1, 2, 0, 3))
		} else {
			xt = ctx.Cont(ctx.Permute(ctx.Reshape3D(x, int64(l.In), T, N), 1, 0, 2, 3))
		}
		kernel := ctx.Reshape3D(m.encW[i], 3, int64(l.In), int64(l.Out))
		cols := ctx.Im2Col1D(kernel, xt, l.Stride, 1, 1, ggml.TypeF32) // [3*In, T', N]
		T = (T+2-3)/int64(l.Stride) + 1
		y := ctx.MulMat(m.encW[i], ctx.Reshape2D(cols, int64(3*l.In), T*N)) // [Out, T'*N]
		x = ctx.Relu(ctx.Add(y, m.encB[i]))
	}
	if T != 1 {
		return fail(fmt.Errorf("silero_vad: encoder output has %d frames per chunk, want 1", T))
	}
	// LSTM input projection for every chunk at once: [512, N].
	gx := ctx.Add(ctx.MulMat(m.wih, x), m.bias)

	// The recurrence, unrolled over the block.
	const H = vad.Hidden
	hs := make([]*ggml.Tensor, n)
	hPrev, cPrev := h, c
	for t := 0; t < n; t++ {
		gates := ctx.Add(ctx.View1D(gx, 4*H, uint64(t*4*H*f32)), ctx.MulMat(m.whh, hPrev))
		sig := ctx.Sigmoid(gates)
		ig := ctx.View1D(sig, H, 0)
		fg := ctx.View1D(sig, H, H*f32)
		og := ctx.View1D(sig, H, 3*H*f32)
		gg := ctx.Tanh(ctx.View1D(gates, H, 2*H*f32))
		cPrev = ctx.Add(ctx.Mul(fg, cPrev), ctx.Mul(ig, gg))
		hPrev = ctx.Mul(og, ctx.Tanh(cPrev))
		hs[t] = hPrev
	}
	// Carry the state to the next block (the copies depend on the last
	// step, which depends on every read of h and c).
	if err := g.Expand(ctx.Cpy(hPrev, h)); err != nil {
		return fail(err)
	}
	if err := g.Expand(ctx.Cpy(cPrev, c)); err != nil {
		return fail(err)
	}
	// Decoder for every chunk: gather the hidden states into [128, N] with
	// a balanced tree of concatenations (explicit dependencies, no writes
	// through views), then ReLU, the 1×1 convolution and the sigmoid.
	hAll := concatTree(ctx, hs)
	logits := ctx.Add(ctx.MulMat(m.decW, ctx.Relu(hAll)), m.decB) // [1, N]
	b.probs = ctx.Sigmoid(logits).SetName("probs").SetOutput()
	if err := g.Expand(b.probs); err != nil {
		return fail(err)
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	b.alloc, err = be.NewAllocator()
	if err != nil {
		return fail(err)
	}
	if err := b.alloc.Alloc(g); err != nil {
		return fail(err)
	}
	return b, nil
}

// concatTree concatenates [128] vectors into [128, len(v)] along dim 1.
func concatTree(ctx *ggml.Context, v []*ggml.Tensor) *ggml.Tensor {
	level := make([]*ggml.Tensor, len(v))
	for i, t := range v {
		level[i] = ctx.Reshape2D(t, vad.Hidden, 1)
	}
	for len(level) > 1 {
		next := make([]*ggml.Tensor, 0, (len(level)+1)/2)
		for i := 0; i+1 < len(level); i += 2 {
			next = append(next, ctx.Concat(level[i], level[i+1], 1))
		}
		if len(level)%2 == 1 {
			next = append(next, level[len(level)-1])
		}
		level = next
	}
	return level[0]
}

// fillWindows writes the STFT input of chunks [first, first+n) of samples
// into dst ([padded]×n): the previous 64 samples (zeros before the start),
// the chunk's 512 (zeros past the end), then the reflection of the window's
// last 64 samples but one.
func fillWindows(dst []float32, samples []float32, first, n int) {
	for j := 0; j < n; j++ {
		w := dst[j*padded : (j+1)*padded]
		start := (first+j)*vad.ChunkSize - vad.ContextSize
		for i := 0; i < vad.WindowSize; i++ {
			k := start + i
			if k >= 0 && k < len(samples) {
				w[i] = samples[k]
			} else {
				w[i] = 0
			}
		}
		for k := 0; k < vad.PadRight; k++ {
			w[vad.WindowSize+k] = w[vad.WindowSize-2-k]
		}
	}
}
