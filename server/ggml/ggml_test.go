package ggml

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

var (
	testOnce   sync.Once
	testLib    *Library
	testLibErr error
	vulkanEnv  bool
)

// openTestLib opens the ggml folder once per test binary: the Vulkan build
// when present (it holds the CPU backend too), so both backends are tested.
func openTestLib(t *testing.T) *Library {
	t.Helper()
	testOnce.Do(func() {
		dir := DefaultDir()
		if _, err := os.Stat(filepath.Join(dir, "libggml-base.so")); err != nil {
			testLibErr = fmt.Errorf("ggml libraries not found in %s: run `make deps` (scripts/fetch-ggml.sh) first", dir)
			return
		}
		if filepath.Base(dir) == "vulkan" {
			changed, err := PrepareVulkanEnv(func(f string, a ...any) { fmt.Printf("ggml test: "+f+"\n", a...) })
			vulkanEnv = changed
			if err != nil {
				fmt.Printf("ggml test: Vulkan not prepared: %v\n", err)
			}
		}
		testLib, testLibErr = Open(dir)
	})
	if testLibErr != nil {
		if errors.Is(testLibErr, ErrNotFound) || strings.Contains(testLibErr.Error(), "make deps") && testLib == nil && !errors.Is(testLibErr, ErrVersion) {
			t.Skip(testLibErr)
		}
		t.Fatal(testLibErr)
	}
	return testLib
}

func backends(t *testing.T, lib *Library) []*Backend {
	t.Helper()
	cpu, err := lib.NewBackend("cpu", 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cpu.Close() })
	out := []*Backend{cpu}
	if testing.Short() {
		t.Log("-short: Vulkan not tested (lavapipe compiles its shaders on first use, a minute or more when its cache is cold)")
		return out
	}
	vk, err := lib.NewBackend("vulkan", 0, 0)
	if err != nil {
		t.Logf("Vulkan not tested: %v (install libvulkan1 mesa-vulkan-drivers and run `make deps`)", err)
		return out
	}
	t.Cleanup(func() { vk.Close() })
	return append(out, vk)
}

func TestCheckVersion(t *testing.T) {
	if err := CheckVersion(WantVersion, WantCommit); err != nil {
		t.Fatalf("exact version rejected: %v", err)
	}
	if err := CheckVersion(WantVersion, WantCommit+"ffee"); err != nil {
		t.Fatalf("longer commit hash with the right prefix rejected: %v", err)
	}
	for _, c := range []struct{ v, c string }{{"0.25.0", WantCommit}, {WantVersion, "1234567"}, {"", ""}, {WantVersion, ""}} {
		err := CheckVersion(c.v, c.c)
		if !errors.Is(err, ErrVersion) {
			t.Fatalf("CheckVersion(%q, %q) = %v, want ErrVersion", c.v, c.c, err)
		}
		for _, want := range []string{WantVersion, WantCommit, "make deps"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
		if c.v != "" && !strings.Contains(err.Error(), c.v) {
			t.Errorf("error %q does not name the found version %q", err, c.v)
		}
	}
}

func TestOpenMissing(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{filepath.Join(dir, "absent"), dir} {
		_, err := Open(d)
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "make deps") {
			t.Fatalf("Open(%s) = %v, want ErrNotFound naming make deps", d, err)
		}
	}
	// A base library without a loader.
	if err := os.WriteFile(filepath.Join(dir, "libggml-base.so"), []byte("not a library"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "loader") {
		t.Fatalf("Open without loader = %v", err)
	}
	// Files that are not libraries: a load error naming make deps, and
	// nothing stays loaded (the real libraries open afterwards).
	if err := os.WriteFile(filepath.Join(dir, "libggml.v0.5.0.so"), []byte("not a library"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "cannot load") || !strings.Contains(err.Error(), "make deps") {
		t.Fatalf("Open of non-libraries = %v", err)
	}
	if testLib == nil {
		openTestLib(t)
	}
}

func TestDefaultDirEnv(t *testing.T) {
	t.Setenv(EnvDir, "/some/where")
	if got := DefaultDir(); got != "/some/where" {
		t.Fatalf("DefaultDir with %s set = %q", EnvDir, got)
	}
	t.Setenv(EnvDir, "")
	got := DefaultDir()
	if !strings.Contains(got, filepath.Join(".deps", "ggml")) {
		t.Fatalf("DefaultDir = %q, want a .deps/ggml folder", got)
	}
}

func TestOpenAndDevices(t *testing.T) {
	lib := openTestLib(t)
	if lib.Version() != WantVersion || !strings.HasPrefix(lib.Commit(), WantCommit) {
		t.Fatalf("version %s %s", lib.Version(), lib.Commit())
	}
	again, err := Open(lib.Dir())
	if err != nil || again != lib {
		t.Fatalf("second Open of the same folder = %p, %v; want the same library", again, err)
	}
	if _, err := Open(t.TempDir()); err == nil {
		t.Fatal("opening a second folder in one process succeeded")
	}
	devs := lib.Devices()
	hasCPU := false
	for _, d := range devs {
		hasCPU = hasCPU || d.Backend == "cpu" && d.Type == "cpu" && d.Ordinal == 0 && d.MemoryTotal > 0
	}
	if !hasCPU {
		t.Fatalf("devices %+v: no CPU device", devs)
	}
	var buf bytes.Buffer
	if err := lib.DeviceTable(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"BACKEND", "DESCRIPTION", "TYPE", "MEMORY TOTAL", "cpu", "CPU"} {
		if !strings.Contains(out, want) {
			t.Errorf("device table lacks %q:\n%s", want, out)
		}
	}
	if vulkanEnv {
		if !strings.Contains(out, "llvmpipe") {
			t.Errorf("lavapipe prepared but the table shows no llvmpipe device:\n%s", out)
		}
	}
	t.Logf("\n%s", out)
}

func TestNewBackendErrors(t *testing.T) {
	lib := openTestLib(t)
	_, err := lib.NewBackend("cuda", 0, 1)
	if !errors.Is(err, ErrNoBackend) || !strings.Contains(err.Error(), "cpu device 0") {
		t.Fatalf("cuda on a machine without it: %v; want ErrNoBackend listing the cpu device", err)
	}
	_, err = lib.NewBackend("cpu", 5, 1)
	if !errors.Is(err, ErrNoBackend) || !strings.Contains(err.Error(), "--device 5") {
		t.Fatalf("cpu device 5: %v", err)
	}
	_, err = lib.NewBackend("tpu", 0, 1)
	if !errors.Is(err, ErrNoBackend) {
		t.Fatalf("unknown backend: %v", err)
	}
	be, err := lib.NewBackend("CPU", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if be.Kind() != "cpu" || be.Threads() <= 0 {
		t.Fatalf("backend %s threads %d", be, be.Threads())
	}
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	if err := be.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if _, err := be.Fork(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Fork after Close = %v", err)
	}
	if _, err := be.NewAllocator(); !errors.Is(err, ErrClosed) {
		t.Fatalf("NewAllocator after Close = %v", err)
	}
}

func randF32(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = r.Float32()*2 - 1
	}
	return v
}

func maxDiff(a, b []float32) float64 {
	m := 0.0
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i]-b[i])))
	}
	return m
}

// refMulMat is ggml's mul_mat in float64: a holds m rows of k values, b
// holds n rows of k values, and out[j*m+i] is the dot product of a's row i
// and b's row j.
func refMulMat(a, b []float32, k, m, n int) []float64 {
	out := make([]float64, m*n)
	for j := range n {
		for i := range m {
			s := 0.0
			for q := range k {
				s += float64(a[i*k+q]) * float64(b[j*k+q])
			}
			out[j*m+i] = s
		}
	}
	return out
}

// The helpers below do one step of building or running a graph and fail the
// test on any error; closing what they return stays with the caller, so each
// test keeps its own order of teardown.

// newCtx opens a context with room for maxTensors tensors.
func newCtx(t testing.TB, lib *Library, maxTensors int) *Context {
	t.Helper()
	ctx, err := lib.NewContext(maxTensors)
	if err != nil {
		t.Fatal(err)
	}
	return ctx
}

// cpuBackend opens the CPU backend (device 0) with one thread.
func cpuBackend(t testing.TB, lib *Library) *Backend {
	t.Helper()
	be, err := lib.NewBackend("cpu", 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	return be
}

// buildGraph makes a default-size graph of ctx and expands it with outs, in
// order.
func buildGraph(t testing.TB, ctx *Context, outs ...*Tensor) *Graph {
	t.Helper()
	g, err := ctx.NewGraph(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range outs {
		if err := g.Expand(out); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

// allocCtx places every tensor of ctx in one buffer of be.
func allocCtx(t testing.TB, ctx *Context, be *Backend) *Buffer {
	t.Helper()
	buf, err := ctx.Alloc(be)
	if err != nil {
		t.Fatal(err)
	}
	return buf
}

// allocGraph places the tensors of g with a new Allocator of be.
func allocGraph(t testing.TB, be *Backend, g *Graph) *Allocator {
	t.Helper()
	alloc, err := be.NewAllocator()
	if err != nil {
		t.Fatal(err)
	}
	if err := alloc.Alloc(g); err != nil {
		alloc.Close()
		t.Fatal(err)
	}
	return alloc
}

// setF32 writes v into x.
func setF32(t testing.TB, x *Tensor, v []float32) {
	t.Helper()
	if err := x.SetF32(v); err != nil {
		t.Fatal(err)
	}
}

// compute runs g on be.
func compute(t testing.TB, be *Backend, g *Graph) {
	t.Helper()
	if err := be.Compute(g); err != nil {
		t.Fatal(err)
	}
}

// computeF32 runs g on be and reads out.
func computeF32(t testing.TB, be *Backend, g *Graph, out *Tensor) []float32 {
	t.Helper()
	compute(t, be, g)
	got, err := out.F32()
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestAddOnEveryBackend(t *testing.T) {
	lib := openTestLib(t)
	for _, be := range backends(t, lib) {
		t.Run(be.Kind(), func(t *testing.T) {
			ctx := newCtx(t, lib, 8)
			defer ctx.Close()
			a := ctx.NewTensor1D(TypeF32, 5).SetName("a")
			b := ctx.NewTensor1D(TypeF32, 5).SetName("b")
			sum := ctx.Add(a, b)
			g := buildGraph(t, ctx, sum)
			buf := allocCtx(t, ctx, be)
			defer buf.Close()
			setF32(t, a, []float32{1, 2, 3, 4, 5})
			setF32(t, b, []float32{10, 20, 30, 40, 50.5})
			got := computeF32(t, be, g, sum)
			want := []float32{11, 22, 33, 44, 55.5}
			if maxDiff(got, want) != 0 {
				t.Fatalf("a+b = %v, want %v", got, want)
			}
			if a.Name() != "a" || sum.Shape() != [4]int64{5, 1, 1, 1} || sum.Type() != TypeF32 {
				t.Fatalf("metadata: name %q shape %v type %s", a.Name(), sum.Shape(), sum.Type())
			}
		})
	}
}

// TestMulMatConvAllocator builds weights in one context (allocated once) and
// a graph in another (placed by an Allocator), as a model family does.
func TestMulMatConvAllocator(t *testing.T) {
	lib := openTestLib(t)
	r := rand.New(rand.NewPCG(1, 2))
	const (
		K, M, N          = 24, 7, 5
		L, Cin, Cout, NB = 40, 3, 4, 2
		KW, stride, p    = 5, 2, 1
	)
	av, bv := randF32(r, K*M), randF32(r, K*N)
	wv, xv := randF32(r, KW*Cin*Cout), randF32(r, L*Cin*NB)

	// References in float64.
	mm := make([]float32, M*N)
	for i, s := range refMulMat(av, bv, K, M, N) {
		mm[i] = float32(s)
	}
	lout := (L+2*p-KW)/stride + 1
	conv := make([]float32, lout*Cout*NB)
	for nb := range NB {
		for o := range Cout {
			for i := range lout {
				s := 0.0
				for c := range Cin {
					for k := range KW {
						x := i*stride + k - p
						if x >= 0 && x < L {
							s += float64(wv[(o*Cin+c)*KW+k]) * float64(xv[(nb*Cin+c)*L+x])
						}
					}
				}
				conv[(nb*Cout+o)*lout+i] = float32(math.Tanh(s))
			}
		}
	}

	for _, be := range backends(t, lib) {
		t.Run(be.Kind(), func(t *testing.T) {
			wctx, err := lib.NewContextWith(ContextOptions{Tensors: 4})
			if err != nil {
				t.Fatal(err)
			}
			defer wctx.Close()
			a := wctx.NewTensor2D(TypeF32, K, M)
			w := wctx.NewTensor3D(TypeF32, KW, Cin, Cout)
			wbuf := allocCtx(t, wctx, be)
			defer wbuf.Close()
			setF32(t, a, av)
			setF32(t, w, wv)

			ctx := newCtx(t, lib, 64)
			defer ctx.Close()
			b := ctx.NewTensor2D(TypeF32, K, N).SetInput()
			x := ctx.NewTensor3D(TypeF32, L, Cin, NB).SetInput()
			prod := ctx.MulMat(a, b).SetOutput()
			y := ctx.Tanh(ctx.Conv1D(w, x, stride, p, 1)).SetOutput()
			g := buildGraph(t, ctx, prod, y)
			alloc := allocGraph(t, be, g)
			defer alloc.Close()
			if alloc.Size() <= 0 {
				t.Fatalf("allocator size %d", alloc.Size())
			}
			setF32(t, b, bv)
			setF32(t, x, xv)
			got := computeF32(t, be, g, prod)
			if prod.Shape() != [4]int64{M, N, 1, 1} {
				t.Fatalf("mul_mat shape %v", prod.Shape())
			}
			if d := maxDiff(got, mm); d > 1e-4 {
				t.Fatalf("mul_mat differs from the reference by %g", d)
			}
			gotc, err := y.F32()
			if err != nil {
				t.Fatal(err)
			}
			if y.Shape() != [4]int64{int64(lout), Cout, NB, 1} {
				t.Fatalf("conv shape %v, want [%d %d %d 1]", y.Shape(), lout, Cout, NB)
			}
			// f32 im2col: well inside the 1e-4 a model family needs.
			if d := maxDiff(gotc, conv); d > 1e-5 {
				t.Fatalf("conv_1d differs from the reference by %g", d)
			}
			// Same backend, same inputs: identical bytes. The allocator may
			// reuse an input's memory after its last use, so set them again.
			setF32(t, b, bv)
			setF32(t, x, xv)
			compute(t, be, g)
			again, _ := y.F32()
			for i := range again {
				if math.Float32bits(again[i]) != math.Float32bits(gotc[i]) {
					t.Fatalf("second run differs at %d: %g vs %g", i, again[i], gotc[i])
				}
			}
		})
	}
}

func TestShapeErrorsDoNotAbort(t *testing.T) {
	lib := openTestLib(t)
	ctx := newCtx(t, lib, 16)
	defer ctx.Close()
	a := ctx.NewTensor2D(TypeF32, 4, 3)
	b := ctx.NewTensor2D(TypeF32, 5, 3)
	bad := ctx.MulMat(a, b)
	if bad.Valid() || ctx.Err() == nil || !strings.Contains(ctx.Err().Error(), "mul_mat") {
		t.Fatalf("mul_mat of [4 3] and [5 3]: valid=%v err=%v", bad.Valid(), ctx.Err())
	}
	// Later ops keep the first error and do not call ggml.
	if ctx.Add(bad, a).Valid() || !strings.Contains(ctx.Err().Error(), "mul_mat") {
		t.Fatalf("error not sticky: %v", ctx.Err())
	}
	g, err := ctx.NewGraph(0)
	if err == nil || g != nil {
		t.Fatal("NewGraph on a failed context succeeded")
	}

	for name, build := range map[string]func(c *Context) *Tensor{
		"add":     func(c *Context) *Tensor { return c.Add(c.NewTensor1D(TypeF32, 4), c.NewTensor1D(TypeF32, 3)) },
		"reshape": func(c *Context) *Tensor { return c.Reshape2D(c.NewTensor1D(TypeF32, 6), 4, 2) },
		"view":    func(c *Context) *Tensor { return c.View1D(c.NewTensor1D(TypeF32, 6), 4, 12) },
		"permute": func(c *Context) *Tensor { return c.Permute(c.NewTensor1D(TypeF32, 6), 0, 0, 1, 2) },
		"concat": func(c *Context) *Tensor {
			return c.Concat(c.NewTensor2D(TypeF32, 2, 3), c.NewTensor2D(TypeF32, 2, 4), 0)
		},
		"get_rows": func(c *Context) *Tensor { return c.GetRows(c.NewTensor2D(TypeF32, 2, 3), c.NewTensor1D(TypeF32, 2)) },
		"conv_1d": func(c *Context) *Tensor {
			return c.Conv1D(c.NewTensor3D(TypeF32, 9, 2, 1), c.NewTensor3D(TypeF32, 4, 2, 1), 1, 0, 1)
		},
		"set_name": func(c *Context) *Tensor { return c.NewTensor1D(TypeF32, 1).SetName(strings.Repeat("x", 64)) },
	} {
		c := newCtx(t, lib, 8)
		build(c)
		if c.Err() == nil {
			t.Errorf("%s: no error recorded", name)
		}
		c.Close()
	}

	// A full context is an error, not an abort.
	small, err := lib.NewContextWith(ContextOptions{Tensors: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	small.NewTensor1D(TypeF32, 1)
	small.NewTensor1D(TypeF32, 1)
	if small.NewTensor1D(TypeF32, 1).Valid() || small.Err() == nil || !strings.Contains(small.Err().Error(), "full") {
		t.Fatalf("third tensor in a 2-tensor context: %v", small.Err())
	}
	// A graph larger than its size is an error.
	gctx, err := lib.NewContextWith(ContextOptions{Tensors: 16, Graphs: 1, GraphSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer gctx.Close()
	x := gctx.NewTensor1D(TypeF32, 2)
	y := gctx.Relu(gctx.Tanh(gctx.Sigmoid(x)))
	gg, err := gctx.NewGraph(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := gg.Expand(y); err == nil || !strings.Contains(err.Error(), "size") {
		t.Fatalf("3 nodes in a 2-node graph: %v", err)
	}
}

func TestOwnership(t *testing.T) {
	lib := openTestLib(t)
	be := cpuBackend(t, lib)
	defer be.Close()
	ctx := newCtx(t, lib, 8)
	a := ctx.NewTensor1D(TypeF32, 3)
	b := ctx.NewTensor1D(TypeI32, 3)
	// Data access before allocation is an error.
	if err := a.SetF32([]float32{1, 2, 3}); err == nil || !strings.Contains(err.Error(), "no data") {
		t.Fatalf("set before alloc: %v", err)
	}
	buf := allocCtx(t, ctx, be)
	if buf.Size() < 24 {
		t.Fatalf("buffer size %d", buf.Size())
	}
	if err := a.SetF32([]float32{1, 2}); err == nil {
		t.Fatal("wrong length accepted")
	}
	if err := a.SetI32([]int32{1, 2, 3}); err == nil {
		t.Fatal("i32 into f32 accepted")
	}
	if err := b.SetI32([]int32{7, -8, 9}); err != nil {
		t.Fatal(err)
	}
	if got, err := b.I32(); err != nil || got[1] != -8 {
		t.Fatalf("I32 = %v, %v", got, err)
	}
	if err := a.SetF32At(2, []float32{5}); err != nil {
		t.Fatal(err)
	}
	if err := a.SetF32At(3, []float32{5}); err == nil {
		t.Fatal("write past the end accepted")
	}
	if err := buf.Clear(0); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.F32(); got[2] != 0 {
		t.Fatalf("after Clear: %v", got)
	}
	if err := buf.Close(); err != nil {
		t.Fatal(err)
	}
	if err := buf.Close(); err != nil {
		t.Fatal("second buffer Close:", err)
	}
	if err := a.SetF32([]float32{1, 2, 3}); !errors.Is(err, ErrClosed) {
		t.Fatalf("set after buffer Close = %v, want ErrClosed", err)
	}
	if err := ctx.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ctx.Close(); err != nil {
		t.Fatal("second context Close:", err)
	}
	if a.Valid() || a.Shape() != [4]int64{} {
		t.Fatal("tensor still valid after its context closed")
	}
	if _, err := a.F32(); err == nil {
		t.Fatal("read after context Close accepted")
	}
	if ctx.NewTensor1D(TypeF32, 1).Valid() || !errors.Is(ctx.Err(), ErrClosed) {
		t.Fatalf("op on closed context: %v", ctx.Err())
	}
	// Typed access to a non-contiguous view is refused; its source works.
	vctx := newCtx(t, lib, 4)
	defer vctx.Close()
	m := vctx.NewTensor2D(TypeF32, 2, 3)
	tr := vctx.Transpose(m)
	vbuf := allocCtx(t, vctx, be)
	defer vbuf.Close()
	setF32(t, m, []float32{1, 2, 3, 4, 5, 6})
	if _, err := tr.F32(); err == nil || !strings.Contains(err.Error(), "non-contiguous") {
		t.Fatalf("F32 of a transposed view: %v", err)
	}
	var nilBuf *Buffer
	var nilAlloc *Allocator
	var nilCtx *Context
	var nilBe *Backend
	if nilBuf.Close() != nil || nilAlloc.Close() != nil || nilCtx.Close() != nil || nilBe.Close() != nil {
		t.Fatal("Close on nil wrappers failed")
	}
	if _, err := nilBe.Fork(); err == nil {
		t.Fatal("Fork of a nil backend succeeded")
	}
}

// TestComputeChecksAllocation: computing an unallocated graph, or one whose
// compute buffer was freed, is an error.
func TestComputeChecksAllocation(t *testing.T) {
	lib := openTestLib(t)
	be := cpuBackend(t, lib)
	defer be.Close()
	ctx := newCtx(t, lib, 8)
	defer ctx.Close()
	x := ctx.NewTensor1D(TypeF32, 4).SetInput()
	y := ctx.Scale(ctx.Sqr(x), 0.5)
	g := buildGraph(t, ctx, y)
	if err := be.Compute(g); err == nil || !strings.Contains(err.Error(), "no memory") {
		t.Fatalf("compute without allocation: %v", err)
	}
	alloc, err := be.NewAllocator()
	if err != nil {
		t.Fatal(err)
	}
	if err := alloc.Reserve(g); err != nil {
		t.Fatal(err)
	}
	if err := alloc.Alloc(g); err != nil {
		t.Fatal(err)
	}
	setF32(t, x, []float32{1, -2, 3, 4})
	compute(t, be, g)
	got, _ := y.F32()
	if maxDiff(got, []float32{0.5, 2, 4.5, 8}) != 0 {
		t.Fatalf("0.5*x^2 = %v", got)
	}
	alloc.Close()
	alloc.Close()
	if err := be.Compute(g); !errors.Is(err, ErrClosed) {
		t.Fatalf("compute after the allocator closed: %v", err)
	}
	if _, err := y.F32(); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after the allocator closed: %v", err)
	}
}

// TestForkParallel: forked streams share one weights buffer and compute at
// the same time (run with -race).
func TestForkParallel(t *testing.T) {
	lib := openTestLib(t)
	for _, be := range backends(t, lib) {
		t.Run(be.Kind(), func(t *testing.T) {
			wctx := newCtx(t, lib, 2)
			defer wctx.Close()
			w := wctx.NewTensor2D(TypeF32, 8, 8)
			wbuf := allocCtx(t, wctx, be)
			defer wbuf.Close()
			wv := make([]float32, 64)
			for i := range 8 {
				wv[i*8+i] = 2 // 2 * identity
			}
			setF32(t, w, wv)
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for s := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- forkRun(lib, be, w, float32(s))
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
}

func forkRun(lib *Library, be *Backend, w *Tensor, base float32) error {
	fb, err := be.Fork()
	if err != nil {
		return err
	}
	defer fb.Close()
	ctx, err := lib.NewContext(8)
	if err != nil {
		return err
	}
	defer ctx.Close()
	x := ctx.NewTensor2D(TypeF32, 8, 3).SetInput()
	y := ctx.MulMat(w, x)
	g, err := ctx.NewGraph(0)
	if err != nil {
		return err
	}
	if err := g.Expand(y); err != nil {
		return err
	}
	alloc, err := fb.NewAllocator()
	if err != nil {
		return err
	}
	defer alloc.Close()
	if err := alloc.Alloc(g); err != nil {
		return err
	}
	in := make([]float32, 24)
	for i := range in {
		in[i] = base + float32(i)
	}
	for range 20 {
		if err := x.SetF32(in); err != nil {
			return err
		}
		if err := fb.Compute(g); err != nil {
			return err
		}
		out, err := y.F32()
		if err != nil {
			return err
		}
		for i := range out {
			if out[i] != 2*in[i] {
				return fmt.Errorf("stream %g: out[%d] = %g, want %g", base, i, out[i], 2*in[i])
			}
		}
	}
	return nil
}

// TestSetenvReachesC checks that os.Setenv is visible to C getenv with
// CGO_ENABLED=0, which PrepareVulkanEnv relies on.
func TestSetenvReachesC(t *testing.T) {
	libc, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		t.Skip("libc.so.6 not loadable:", err)
	}
	var getenv func(name string) string
	purego.RegisterLibFunc(&getenv, libc, "getenv")
	t.Setenv("AUDIOPROOF_GGML_TEST_ENV", "seen-by-c")
	if got := getenv("AUDIOPROOF_GGML_TEST_ENV"); got != "seen-by-c" {
		t.Fatalf("C getenv sees %q after os.Setenv", got)
	}
}

func TestPrepareVulkanEnvRespectsUser(t *testing.T) {
	t.Setenv(EnvVkVisibleDevices, "1")
	t.Setenv(EnvVkDisableF16, "0")
	changed, err := PrepareVulkanEnv(nil)
	if err != nil || changed {
		t.Fatalf("with %s set by the user: changed=%v err=%v", EnvVkVisibleDevices, changed, err)
	}
	if os.Getenv(EnvVkVisibleDevices) != "1" || os.Getenv(EnvVkDisableF16) != "0" {
		t.Fatal("user setting overwritten")
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 3 << 30: "3.0 GiB", 1536 << 20: "1.5 GiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestLogLines(t *testing.T) {
	var got []string
	SetLogger(func(level LogLevel, msg string) { got = append(got, level.String()+":"+msg) })
	defer SetLogger(nil)
	cstr := func(s string) uintptr {
		b := append([]byte(s), 0)
		keep = append(keep, b)
		return uintptr(unsafe.Pointer(&b[0]))
	}
	onLog(uintptr(LogInfo), cstr("load_backend: "), 0)
	onLog(uintptr(logCont), cstr("loaded CPU\nsecond "), 0)
	onLog(uintptr(LogWarn), cstr("line\n"), 0)
	want := []string{"info:load_backend: loaded CPU", "warn:second line"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("log lines %q, want %q", got, want)
	}
}

var keep [][]byte

// BenchmarkComputeOverhead measures Compute on a 2000-node graph of tiny
// ops: the binding's per-call cost, not ggml's arithmetic.
func BenchmarkComputeOverhead(b *testing.B) {
	lib := openTestLib(&testing.T{})
	be := cpuBackend(b, lib)
	defer be.Close()
	ctx := newCtx(b, lib, 2100)
	defer ctx.Close()
	x := ctx.NewTensor1D(TypeF32, 4).SetInput()
	y := x
	for range 2000 {
		y = ctx.Add(y, x)
	}
	g := buildGraph(b, ctx, y)
	a := allocGraph(b, be, g)
	defer a.Close()
	b.ResetTimer()
	for range b.N {
		if err := be.Compute(g); err != nil {
			b.Fatal(err)
		}
	}
}

// TestVersionMismatch builds a fake ggml (another version) with the C
// compiler and opens it in a child process (one ggml folder per process).
func TestVersionMismatch(t *testing.T) {
	if dir := os.Getenv("AUDIOPROOF_GGML_FAKE_DIR"); dir != "" {
		_, err := Open(dir)
		fmt.Printf("OPEN-ERROR: %v\n", err)
		return
	}
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not installed; the version check is covered by TestCheckVersion")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "fake.c")
	if err := os.WriteFile(src, []byte("const char *ggml_version(void){return \"0.24.0\";}\nconst char *ggml_commit(void){return \"deadbee\";}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, lib := range []string{"libggml-base.so", "libggml.v0.5.0.so"} {
		if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", filepath.Join(dir, lib), src).CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", lib, err, out)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestVersionMismatch$", "-test.count=1")
	cmd.Env = append(os.Environ(), "AUDIOPROOF_GGML_FAKE_DIR="+dir)
	out, _ := cmd.CombinedOutput()
	got := string(out)
	for _, want := range []string{"OPEN-ERROR: ggml: version mismatch", "0.24.0", "deadbee", WantVersion, WantCommit, "make deps"} {
		if !strings.Contains(got, want) {
			t.Errorf("child output lacks %q:\n%s", want, got)
		}
	}
}

func TestLiveCounts(t *testing.T) {
	lib := openTestLib(t)
	base := lib.Live()
	be := cpuBackend(t, lib)
	fork, err := be.Fork()
	if err != nil {
		t.Fatal(err)
	}
	ctx := newCtx(t, lib, 4)
	x := ctx.NewTensor1D(TypeF32, 8)
	g := buildGraph(t, ctx, ctx.Relu(x))
	alloc, err := fork.NewAllocator()
	if err != nil {
		t.Fatal(err)
	}
	wctx := newCtx(t, lib, 1)
	wctx.NewTensor1D(TypeF32, 8)
	buf := allocCtx(t, wctx, be)
	want := Live{Contexts: base.Contexts + 2, Buffers: base.Buffers + 1, Allocators: base.Allocators + 1, Backends: base.Backends + 2}
	if got := lib.Live(); got != want {
		t.Fatalf("live %+v, want %+v", got, want)
	}
	for range 2 {
		for _, c := range []interface{ Close() error }{buf, wctx, alloc, g, ctx, fork, be} {
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := lib.Live(); got != base {
		t.Fatalf("after closing everything twice: live %+v, want %+v", got, base)
	}
}

// TestComputeRefusesForeignBuffers: weights placed by the CPU backend cannot
// feed a Vulkan graph; Compute says so instead of crashing in the driver.
func TestComputeRefusesForeignBuffers(t *testing.T) {
	lib := openTestLib(t)
	bes := backends(t, lib)
	if len(bes) < 2 {
		t.Skip("needs the Vulkan backend (lavapipe): install libvulkan1 mesa-vulkan-drivers and run `make deps`")
	}
	cpu, vk := bes[0], bes[1]
	wctx := newCtx(t, lib, 1)
	defer wctx.Close()
	w := wctx.NewTensor1D(TypeF32, 4).SetName("w")
	wbuf := allocCtx(t, wctx, cpu)
	defer wbuf.Close()
	ctx := newCtx(t, lib, 4)
	defer ctx.Close()
	x := ctx.NewTensor1D(TypeF32, 4)
	g := buildGraph(t, ctx, ctx.Add(x, w))
	alloc := allocGraph(t, vk, g)
	defer alloc.Close()
	err := vk.Compute(g)
	if err == nil || !strings.Contains(err.Error(), `"w"`) || !strings.Contains(err.Error(), "cannot use") {
		t.Fatalf("Vulkan graph reading a CPU buffer: %v", err)
	}
}

func TestProbeVulkan(t *testing.T) {
	if _, err := os.Stat(LavapipeICD); err != nil {
		t.Skip("lavapipe not installed (apt-get install -y libvulkan1 mesa-vulkan-drivers)")
	}
	t.Setenv(EnvVkICDFilenames, LavapipeICD)
	devs, err := ProbeVulkan()
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) == 0 {
		t.Fatal("lavapipe ICD selected but no Vulkan device reported")
	}
	for _, d := range devs {
		if d.Type != "cpu" || d.IsGPU() || !strings.Contains(d.Name, "llvmpipe") {
			t.Errorf("lavapipe device %+v: want a cpu-type llvmpipe device", d)
		}
	}
}

func TestDefaultDirSearchesUpward(t *testing.T) {
	root := t.TempDir()
	mk := func(sub string) {
		d := filepath.Join(root, ".deps", "ggml", sub)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "libggml-base.so"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	nested := filepath.Join(root, "a", "b", "c")
	if err := os.MkdirAll(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvDir, "")
	t.Chdir(nested)
	mk("cpu")
	if got, want := DefaultDir(), filepath.Join(root, ".deps", "ggml", "cpu"); got != want {
		t.Fatalf("with only the CPU build: %q, want %q", got, want)
	}
	mk("vulkan")
	if got, want := DefaultDir(), filepath.Join(root, ".deps", "ggml", "vulkan"); got != want {
		t.Fatalf("with both builds: %q, want the Vulkan one %q", got, want)
	}
}

// TestAllocRefusesClosedBuffers: a graph writing into state whose buffer was
// closed is refused by Alloc and Compute, and the closed buffer is never
// mistaken for the allocator's own.
func TestAllocRefusesClosedBuffers(t *testing.T) {
	lib := openTestLib(t)
	be := cpuBackend(t, lib)
	defer be.Close()
	sctx := newCtx(t, lib, 1)
	defer sctx.Close()
	state := sctx.NewTensor1D(TypeF32, 4).SetName("state")
	sbuf := allocCtx(t, sctx, be)
	ctx := newCtx(t, lib, 8)
	defer ctx.Close()
	x := ctx.NewTensor1D(TypeF32, 4).SetInput()
	g := buildGraph(t, ctx, ctx.Cpy(ctx.Add(x, state), state))
	sbuf.Close()
	alloc, err := be.NewAllocator()
	if err != nil {
		t.Fatal(err)
	}
	defer alloc.Close()
	if err := alloc.Alloc(g); !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "state") {
		t.Fatalf("Alloc of a graph using a closed state buffer: %v", err)
	}
	if err := be.Compute(g); err == nil {
		t.Fatal("Compute of a graph using a closed state buffer succeeded")
	}
}

// TestVulkanBufferChurn computes graphs of changing shapes on one Vulkan
// stream, freeing each graph's buffer before the next. ggml-vulkan reuses
// descriptor sets that still point at freed buffers; under lavapipe that
// corrupted the heap within a few hundred graphs until Compute learned to
// replace a stream whose buffers were freed.
func TestVulkanBufferChurn(t *testing.T) {
	lib := openTestLib(t)
	bes := backends(t, lib)
	if len(bes) < 2 {
		t.Skip("needs the Vulkan backend (lavapipe): install libvulkan1 mesa-vulkan-drivers and run `make deps`")
	}
	vk := bes[1]
	r := rand.New(rand.NewPCG(1, 2))
	d := func() int64 { return 1 + r.Int64N(4) }
	lib.liveMu.Lock()
	before := lib.recycles
	lib.liveMu.Unlock()
	for i := range 300 {
		ctx := newCtx(t, lib, 8)
		k, m, n := d()*d(), d(), d()*d()
		w := ctx.NewTensor2D(TypeF32, k, m)
		x := ctx.NewTensor2D(TypeF32, k, n)
		y := ctx.MulMat(w, ctx.Relu(x))
		g := buildGraph(t, ctx, y)
		buf := allocCtx(t, ctx, vk)
		wv, xv := randF32(r, int(k*m)), randF32(r, int(k*n))
		setF32(t, w, wv)
		setF32(t, x, xv)
		if err := vk.Compute(g); err != nil {
			t.Fatalf("graph %d: %v", i, err)
		}
		got, err := y.F32()
		if err != nil {
			t.Fatal(err)
		}
		for j := range n {
			for o := range m {
				s := 0.0
				for q := range k {
					s += float64(wv[o*k+q]) * float64(max(xv[j*k+q], 0))
				}
				if diff := math.Abs(s - float64(got[j*m+o])); diff > 1e-3 {
					t.Fatalf("graph %d: y[%d,%d] = %g, want %g", i, o, j, got[j*m+o], s)
				}
			}
		}
		buf.Close()
		ctx.Close()
	}
	lib.liveMu.Lock()
	after := lib.recycles
	lib.liveMu.Unlock()
	if after-before < 290 {
		t.Fatalf("the stream was replaced %d times for 300 freed buffers", after-before)
	}
}
