package ggml

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// at indexes a row-major-in-ggml-order [n0, n1, n2] slice: element (i0, i1, i2).
func at(v []float32, n0, n1 int, i0, i1, i2 int) float32 { return v[(i2*n1+i1)*n0+i0] }

// TestOpsAgainstGo checks every bound op's arguments and shape conventions
// against a Go reference, on each backend.
func TestOpsAgainstGo(t *testing.T) {
	lib := openTestLib(t)
	const n0, n1, n2 = 5, 3, 2
	r := rand.New(rand.NewPCG(7, 9))
	av := make([]float32, n0*n1*n2)
	bv := make([]float32, n0*n1*n2)
	for i := range av {
		av[i] = 0.1 + r.Float32()*2 // positive, for sqrt and log
		bv[i] = r.Float32()*2 - 1
	}
	rowv := randF32(r, n0) // broadcast row
	idx := []int32{2, 0, 2}
	elem := func(f func(a, b float32) float32) []float32 {
		out := make([]float32, len(av))
		for i := range av {
			out[i] = f(av[i], bv[i])
		}
		return out
	}
	type tc struct {
		name  string
		build func(c *Context, a, b, row *Tensor, ix *Tensor) *Tensor
		shape [4]int64
		want  []float32
	}
	full := [4]int64{n0, n1, n2, 1}
	cases := []tc{
		{"sub", func(c *Context, a, b, _, _ *Tensor) *Tensor { return c.Sub(a, b) }, full, elem(func(a, b float32) float32 { return a - b })},
		{"div", func(c *Context, a, b, _, _ *Tensor) *Tensor { return c.Div(b, a) }, full, elem(func(a, b float32) float32 { return b / a })},
		{"mul_broadcast", func(c *Context, a, _, row, _ *Tensor) *Tensor { return c.Mul(a, row) }, full, func() []float32 {
			out := make([]float32, len(av))
			for i := range av {
				out[i] = av[i] * rowv[i%n0]
			}
			return out
		}()},
		{"repeat", func(c *Context, a, _, row, _ *Tensor) *Tensor { return c.Repeat(row, a) }, full, func() []float32 {
			out := make([]float32, len(av))
			for i := range out {
				out[i] = rowv[i%n0]
			}
			return out
		}()},
		{"sqrt", func(c *Context, a, _, _, _ *Tensor) *Tensor { return c.Sqrt(a) }, full, elem(func(a, _ float32) float32 { return float32(math.Sqrt(float64(a))) })},
		{"sqr", func(c *Context, a, _, _, _ *Tensor) *Tensor { return c.Sqr(ident(c, a)) }, full, elem(func(a, _ float32) float32 { return a * a })},
		{"sigmoid", func(c *Context, _, b, _, _ *Tensor) *Tensor { return c.Sigmoid(b) }, full, elem(func(_, b float32) float32 { return float32(1 / (1 + math.Exp(-float64(b)))) })},
		{"tanh", func(c *Context, _, b, _, _ *Tensor) *Tensor { return c.Tanh(b) }, full, elem(func(_, b float32) float32 { return float32(math.Tanh(float64(b))) })},
		{"relu", func(c *Context, _, b, _, _ *Tensor) *Tensor { return c.Relu(b) }, full, elem(func(_, b float32) float32 { return max(b, 0) })},
		{"abs", func(c *Context, _, b, _, _ *Tensor) *Tensor { return c.Abs(b) }, full, elem(func(_, b float32) float32 { return float32(math.Abs(float64(b))) })},
		{"neg", func(c *Context, _, b, _, _ *Tensor) *Tensor { return c.Neg(b) }, full, elem(func(_, b float32) float32 { return -b })},
		{"exp", func(c *Context, _, b, _, _ *Tensor) *Tensor { return c.Exp(b) }, full, elem(func(_, b float32) float32 { return float32(math.Exp(float64(b))) })},
		{"log", func(c *Context, a, _, _, _ *Tensor) *Tensor { return c.Log(a) }, full, elem(func(a, _ float32) float32 { return float32(math.Log(float64(a))) })},
		{"scale_bias", func(c *Context, _, b, _, _ *Tensor) *Tensor { return c.ScaleBias(b, -1.5, 0.25) }, full, elem(func(_, b float32) float32 { return b*-1.5 + 0.25 })},
		{"clamp", func(c *Context, _, b, _, _ *Tensor) *Tensor { return c.Clamp(b, -0.5, 0.25) }, full, elem(func(_, b float32) float32 { return min(max(b, -0.5), 0.25) })},
		{"sum_rows", func(c *Context, a, _, _, _ *Tensor) *Tensor { return c.SumRows(a) }, [4]int64{1, n1, n2, 1}, func() []float32 {
			out := make([]float32, n1*n2)
			for i := range av {
				out[i/n0] += av[i]
			}
			return out
		}()},
		{"permute_cont", func(c *Context, a, _, _, _ *Tensor) *Tensor { return c.Cont(c.Permute(a, 2, 0, 1, 3)) }, [4]int64{n1, n2, n0, 1}, func() []float32 {
			// dim 0 -> 2, 1 -> 0, 2 -> 1: out(i1, i2, i0) = a(i0, i1, i2).
			out := make([]float32, len(av))
			for i2 := range n2 {
				for i1 := range n1 {
					for i0 := range n0 {
						out[(i0*n2+i2)*n1+i1] = at(av, n0, n1, i0, i1, i2)
					}
				}
			}
			return out
		}()},
		{"transpose_cont", func(c *Context, a, _, _, _ *Tensor) *Tensor { return c.Cont(c.Transpose(a)) }, [4]int64{n1, n0, n2, 1}, func() []float32 {
			out := make([]float32, len(av))
			for i2 := range n2 {
				for i1 := range n1 {
					for i0 := range n0 {
						out[(i2*n0+i0)*n1+i1] = at(av, n0, n1, i0, i1, i2)
					}
				}
			}
			return out
		}()},
		{"view3d_cont", func(c *Context, a, _, _, _ *Tensor) *Tensor {
			// Columns 1..3 of every row, rows 1..2, both slices.
			return c.Cont(c.View3D(a, 3, 2, n2, n0*4, n0*n1*4, (n0+1)*4))
		}, [4]int64{3, 2, n2, 1}, func() []float32 {
			var out []float32
			for i2 := range n2 {
				for i1 := 1; i1 < 3; i1++ {
					for i0 := 1; i0 < 4; i0++ {
						out = append(out, at(av, n0, n1, i0, i1, i2))
					}
				}
			}
			return out
		}()},
		{"view4d_reshape", func(c *Context, a, _, _, _ *Tensor) *Tensor {
			return c.Reshape1D(c.Cont(c.View4D(a, n0, n1, 1, n2, n0*4, n0*n1*4, n0*n1*4, 0)), n0*n1*n2)
		}, [4]int64{n0 * n1 * n2, 1, 1, 1}, av},
		{"concat_dim1", func(c *Context, a, b, _, _ *Tensor) *Tensor { return c.Concat(a, b, 1) }, [4]int64{n0, 2 * n1, n2, 1}, func() []float32 {
			var out []float32
			for i2 := range n2 {
				out = append(out, av[i2*n0*n1:(i2+1)*n0*n1]...)
				out = append(out, bv[i2*n0*n1:(i2+1)*n0*n1]...)
			}
			return out
		}()},
		{"get_rows", func(c *Context, a, _, _, ix *Tensor) *Tensor {
			return c.GetRows(c.Reshape2D(a, n0, n1*n2), ix)
		}, [4]int64{n0, 3, 1, 1}, func() []float32 {
			var out []float32
			for _, i := range idx {
				out = append(out, av[int(i)*n0:(int(i)+1)*n0]...)
			}
			return out
		}()},
		{"pad_ext", func(c *Context, a, _, _, _ *Tensor) *Tensor { return c.PadExt(a, 1, 2, 0, 1, 0, 0, 0, 0) }, [4]int64{n0 + 3, n1 + 1, n2, 1}, func() []float32 {
			out := make([]float32, (n0+3)*(n1+1)*n2)
			for i2 := range n2 {
				for i1 := range n1 {
					for i0 := range n0 {
						out[(i2*(n1+1)+i1)*(n0+3)+i0+1] = at(av, n0, n1, i0, i1, i2)
					}
				}
			}
			return out
		}()},
		{"pad_reflect_1d", func(c *Context, a, _, _, _ *Tensor) *Tensor { return c.PadReflect1D(a, 2, 3) }, [4]int64{n0 + 5, n1, n2, 1}, func() []float32 {
			var out []float32
			for row := range n1 * n2 {
				x := av[row*n0 : (row+1)*n0]
				out = append(out, x[2], x[1])
				out = append(out, x...)
				out = append(out, x[3], x[2], x[1])
			}
			return out
		}()},
		{"cpy", func(c *Context, a, b, _, _ *Tensor) *Tensor { return c.Cpy(a, c.Reshape1D(b, n0*n1*n2)) }, [4]int64{n0 * n1 * n2, 1, 1, 1}, av},
	}
	for _, be := range backends(t, lib) {
		t.Run(be.Kind(), func(t *testing.T) {
			for _, k := range cases {
				t.Run(k.name, func(t *testing.T) {
					ctx := newCtx(t, lib, 32)
					defer ctx.Close()
					a := ctx.NewTensor3D(TypeF32, n0, n1, n2).SetInput()
					b := ctx.NewTensor3D(TypeF32, n0, n1, n2).SetInput()
					row := ctx.NewTensor1D(TypeF32, n0).SetInput()
					ix := ctx.NewTensor1D(TypeI32, int64(len(idx))).SetInput()
					out := k.build(ctx, a, b, row, ix).SetOutput()
					g := buildGraph(t, ctx, out)
					// Inputs that the op does not use still need memory to be set.
					buf := allocCtx(t, ctx, be)
					defer buf.Close()
					for _, in := range []struct {
						t *Tensor
						v []float32
					}{{a, av}, {b, bv}, {row, rowv}} {
						setF32(t, in.t, in.v)
					}
					if err := ix.SetI32(idx); err != nil {
						t.Fatal(err)
					}
					compute(t, be, g)
					if out.Shape() != k.shape {
						t.Fatalf("shape %v, want %v", out.Shape(), k.shape)
					}
					got, err := out.F32()
					if err != nil {
						t.Fatal(err)
					}
					if len(got) != len(k.want) {
						t.Fatalf("%d values, want %d", len(got), len(k.want))
					}
					if d := maxDiff(got, k.want); d > 1e-5 {
						t.Fatalf("differs from the Go reference by %g:\n got %v\nwant %v", d, got, k.want)
					}
				})
			}
		})
	}
}

// ident is a*1; it makes "sqr" read its input through one more node.
func ident(c *Context, a *Tensor) *Tensor { return c.Scale(a, 1) }

// TestRandomOpsNeverAbort builds ops on random shapes, types and views. Each
// either records a Context error or computes on the CPU; a shape rule the
// binding missed would abort the test binary in a GGML_ASSERT.
func TestRandomOpsNeverAbort(t *testing.T) {
	lib := openTestLib(t)
	kind := "cpu"
	if v := os.Getenv("GGML_RANDOM_BACKEND"); v != "" {
		kind = v // e.g. vulkan, for a manual run (cold lavapipe shaders are slow)
	}
	be, err := lib.NewBackend(kind, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	seed := uint64(3)
	if v := os.Getenv("GGML_RANDOM_SEED"); v != "" {
		fmt.Sscan(v, &seed)
	}
	r := rand.New(rand.NewPCG(seed, 4))
	dim := func() int64 { return 1 + r.Int64N(4) }
	types := []Type{TypeF32, TypeF32, TypeF32, TypeF16, TypeI32}
	input := func(c *Context) *Tensor {
		x := c.NewTensor4D(types[r.IntN(len(types))], dim(), dim(), dim(), 1+r.Int64N(2))
		switch r.IntN(5) {
		case 0:
			return c.Transpose(x)
		case 1:
			return c.Permute(x, 1, 2, 0, 3)
		case 2:
			ne := x.Shape()
			return c.View3D(x, ne[0], ne[1], 1, x.Strides()[1], x.Strides()[2], 0)
		}
		return x
	}
	ops := []func(c *Context, a, b *Tensor) *Tensor{
		func(c *Context, a, b *Tensor) *Tensor { return c.Add(a, b) },
		func(c *Context, a, b *Tensor) *Tensor { return c.Mul(a, b) },
		func(c *Context, a, b *Tensor) *Tensor { return c.MulMat(a, b) },
		func(c *Context, a, b *Tensor) *Tensor { return c.Repeat(a, b) },
		func(c *Context, a, _ *Tensor) *Tensor { return c.Tanh(a) },
		func(c *Context, a, _ *Tensor) *Tensor { return c.Sqrt(a) },
		func(c *Context, a, _ *Tensor) *Tensor { return c.Scale(a, 2) },
		func(c *Context, a, _ *Tensor) *Tensor { return c.Clamp(a, -1, 1) },
		func(c *Context, a, _ *Tensor) *Tensor { return c.SumRows(a) },
		func(c *Context, a, _ *Tensor) *Tensor { return c.Cont(a) },
		func(c *Context, a, b *Tensor) *Tensor { return c.Concat(a, b, r.IntN(4)) },
		func(c *Context, a, b *Tensor) *Tensor { return c.Cpy(a, b) },
		func(c *Context, a, _ *Tensor) *Tensor { return c.PadExt(a, 1, 0, 0, 2, 0, 0, 0, 0) },
		func(c *Context, a, _ *Tensor) *Tensor { return c.Reshape1D(a, a.Elements()) },
		func(c *Context, a, b *Tensor) *Tensor { return c.Conv1D(a, b, 1+r.IntN(2), r.IntN(2), 1) },
		func(c *Context, a, b *Tensor) *Tensor { return c.Im2Col1D(a, b, 1, 1, 1, TypeF32) },
		func(c *Context, a, b *Tensor) *Tensor { return c.Sub(a, b) },
		func(c *Context, a, b *Tensor) *Tensor { return c.Div(a, b) },
		func(c *Context, a, _ *Tensor) *Tensor { return c.Sigmoid(a) },
		func(c *Context, a, _ *Tensor) *Tensor { return c.Relu(a) },
		func(c *Context, a, _ *Tensor) *Tensor { return c.Exp(a) },
		func(c *Context, a, _ *Tensor) *Tensor { return c.Log(a) },
		func(c *Context, a, _ *Tensor) *Tensor { return c.Abs(a) },
		func(c *Context, a, _ *Tensor) *Tensor { return c.Neg(a) },
		func(c *Context, a, _ *Tensor) *Tensor { return c.Sqr(a) },
		func(c *Context, a, _ *Tensor) *Tensor { return c.ScaleBias(a, 2, 1) },
		func(c *Context, a, _ *Tensor) *Tensor { return c.Cont(c.Transpose(a)) },
		func(c *Context, a, _ *Tensor) *Tensor { return c.Cont(c.Permute(a, 3, 1, 0, 2)) },
		func(c *Context, a, _ *Tensor) *Tensor { return c.PadReflect1D(a, 1, 1) },
		func(c *Context, a, _ *Tensor) *Tensor { return c.Pad(a, 1, 1, 1, 1) },
		func(c *Context, a, _ *Tensor) *Tensor { return c.View1D(a, 2, 4) },
		func(c *Context, a, _ *Tensor) *Tensor { return c.Tanh(c.View2D(a, 2, 2, 8, 0)) },
		func(c *Context, a, _ *Tensor) *Tensor { return c.Reshape2D(a, 2, a.Elements()/2) },
		func(c *Context, a, b *Tensor) *Tensor { return c.MulMat(c.Cont(a), c.Cont(b)) },
		func(c *Context, a, b *Tensor) *Tensor { return c.Add(c.Cont(a), c.Sigmoid(b)) },
	}
	only := -1 // GGML_RANDOM_OP=n runs only op n, to isolate a failure
	if v := os.Getenv("GGML_RANDOM_OP"); v != "" {
		fmt.Sscan(v, &only)
	}
	keep := -1 // GGML_RANDOM_KEEP=i computes only trial i, to isolate a failure
	if v := os.Getenv("GGML_RANDOM_KEEP"); v != "" {
		fmt.Sscan(v, &keep)
	}
	computed, refused := 0, 0
	for i := range 800 {
		ctx := newCtx(t, lib, 64)
		op := r.IntN(len(ops))
		if only >= 0 {
			op = only
		}
		ia, ib := input(ctx), input(ctx)
		out := ops[op](ctx, ia, ib)
		if ctx.Err() != nil {
			refused++
			ctx.Close()
			continue
		}
		g := buildGraph(t, ctx, out)
		buf, err := ctx.Alloc(be)
		if err != nil {
			t.Fatalf("trial %d op %d: %v", i, op, err)
		}
		if keep >= 0 && i != keep {
			buf.Close()
			ctx.Close()
			continue
		}
		if g.Nodes() > 0 {
			if os.Getenv("GGML_TRACE") != "" {
				fmt.Fprintf(os.Stderr, "trial %d op %d: %s <- %v (inputs %s nb%v, %s nb%v)\n", i, op, out, srcDesc(out), ia, ia.Strides(), ib, ib.Strides())
			}
			if err := be.Compute(g); errors.Is(err, ErrUnsupported) {
				refused++
			} else if err != nil {
				t.Fatalf("trial %d op %d (%s): %v", i, op, out, err)
			} else {
				computed++
			}
		}
		buf.Close()
		ctx.Close()
	}
	t.Logf("%d graphs computed, %d refused with an error", computed, refused)
	if computed < 50 || refused < 50 {
		t.Fatalf("the random cases exercise too little: %d computed, %d refused", computed, refused)
	}
}

func srcDesc(t *Tensor) []string {
	var out []string
	for i := range maxSrc {
		if s := tensorSrc(t.h, i); s != 0 {
			out = append(out, fmt.Sprintf("%s %v nb%v", tensorType(s), tensorNE(s), tensorNB(s)))
		}
	}
	return out
}

// TestOverlappingViewRefused: frames of 4 every 2 elements of an 8-element
// signal fit by strides but not by ggml's contiguous sizing; ggml would abort.
func TestOverlappingViewRefused(t *testing.T) {
	lib := openTestLib(t)
	ctx := newCtx(t, lib, 8)
	defer ctx.Close()
	x := ctx.NewTensor1D(TypeF32, 8)
	// 3 frames of 4 with hop 2: strides reach element 7, dense size is 12.
	v := ctx.View2D(x, 4, 3, 2*4, 0)
	if v.Valid() || ctx.Err() == nil || !strings.Contains(ctx.Err().Error(), "contiguous bytes") {
		t.Fatalf("overlapping view: valid=%v err=%v", v.Valid(), ctx.Err())
	}
	ok := newCtx(t, lib, 8)
	defer ok.Close()
	y := ok.NewTensor1D(TypeF32, 16)
	// The same frames inside a 16-element signal: allowed.
	if w := ok.View2D(y, 4, 3, 2*4, 0); !w.Valid() || ok.Err() != nil {
		t.Fatalf("in-bounds overlapping view refused: %v", ok.Err())
	}
}

// TestMulMatPrecision measures a [256 x 258] · [256 x 512] product (the VAD's
// STFT) against float64 on each backend, with and without SetPrecF32.
func TestMulMatPrecision(t *testing.T) {
	lib := openTestLib(t)
	const K, M, N = 256, 258, 512
	r := rand.New(rand.NewPCG(5, 6))
	av, bv := randF32(r, K*M), randF32(r, K*N)
	ref := refMulMat(av, bv, K, M, N)
	for _, be := range backends(t, lib) {
		for _, prec := range []bool{false, true} {
			ctx := newCtx(t, lib, 4)
			a := ctx.NewTensor2D(TypeF32, K, M)
			b := ctx.NewTensor2D(TypeF32, K, N)
			y := ctx.MulMat(a, b)
			if prec {
				y.SetPrecF32()
			}
			g := buildGraph(t, ctx, y)
			buf := allocCtx(t, ctx, be)
			setF32(t, a, av)
			setF32(t, b, bv)
			got := computeF32(t, be, g, y)
			worst := 0.0
			for i := range got {
				worst = math.Max(worst, math.Abs(float64(got[i])-ref[i]))
			}
			t.Logf("%s prec_f32=%v: max error %.3g", be.Kind(), prec, worst)
			if be.Kind() == "cpu" && worst > 1e-4 {
				t.Errorf("cpu product off by %g", worst)
			}
			// PrepareVulkanEnv set GGML_VK_DISABLE_F16=1 (unless the
			// user chose otherwise): then Vulkan stays in f32 too.
			if be.Kind() == "vulkan" && os.Getenv(EnvVkDisableF16) == "1" && worst > 1e-4 {
				t.Errorf("vulkan with %s=1 off by %g", EnvVkDisableF16, worst)
			}
			buf.Close()
			ctx.Close()
		}
	}
	// SetPrecF32 on anything but a MulMat result is an error.
	ctx := newCtx(t, lib, 2)
	defer ctx.Close()
	ctx.Relu(ctx.NewTensor1D(TypeF32, 2)).SetPrecF32()
	if ctx.Err() == nil {
		t.Fatal("SetPrecF32 on a RELU node accepted")
	}
}
