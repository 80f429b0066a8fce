package ggml

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ebitengine/purego"
)

// The ggml version this binding was written for (node-llama-cpp 3.22.1 builds).
const (
	WantVersion = "0.25.1"
	WantCommit  = "0ad4a86"
)

// EnvDir names the environment variable that points at the ggml library folder.
const EnvDir = "AUDIOPROOF_GGML_DIR"

// Sentinel errors; match them with errors.Is.
var (
	// ErrNotFound: the ggml folder or one of its libraries is missing.
	ErrNotFound = errors.New("ggml: libraries not found")
	// ErrVersion: the libraries are a different ggml version than the binding.
	ErrVersion = errors.New("ggml: version mismatch")
	// ErrClosed: a Context, Buffer, Allocator, Graph or Backend was used after Close.
	ErrClosed = errors.New("ggml: use after Close")
	// ErrUnsupported: the backend's device cannot run an op of the graph.
	ErrUnsupported = errors.New("ggml: op not supported by the device")
	// ErrNoBackend: the requested backend or device is not available.
	ErrNoBackend = errors.New("ggml: backend not available")
)

// Library is the opened set of ggml shared libraries. A process opens ggml
// from one folder only (the C libraries are process-global); it stays loaded
// until the process exits.
type Library struct {
	dir     string
	version string
	commit  string
	fn      api
	base    uintptr
	loader  uintptr

	tensorOverhead uintptr

	// liveMu guards live: the ggml buffers that Go code owns and has not
	// freed, so tensor access through a freed buffer is an error, not a crash.
	liveMu sync.Mutex
	live   map[cBuffer]struct{}
	// instances: the open Vulkan backend instances (see backendImpl.used);
	// recycles counts how often one was replaced.
	instances map[*backendImpl]struct{}
	recycles  int
	counts    struct{ contexts, buffers, allocators, backends atomic.Int64 }

	// liveGen counts buffer frees (guarded by liveMu): a graph checked at
	// one generation stays valid until some buffer is freed.
	liveGen uint64
}

var (
	openMu     sync.Mutex
	openedLib  *Library
	openedErr  error
	openedPath string
)

// Open loads the ggml libraries from dir: libggml-base.so, then the backend
// loader libggml*.v*.so, checks their version against WantVersion/WantCommit,
// and loads every backend in the folder (CPU variants, Vulkan, CUDA). Calling
// Open again with the same folder returns the same Library; a different folder
// in the same process is an error.
func Open(dir string) (*Library, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("ggml: folder %q: %w", dir, err)
	}
	openMu.Lock()
	defer openMu.Unlock()
	if openedPath == abs {
		return openedLib, openedErr
	}
	if st, err := os.Stat(abs); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%w: folder %s does not exist; run `make deps` (scripts/fetch-ggml.sh) or point --ggml-dir / %s at a ggml build", ErrNotFound, abs, EnvDir)
	}
	if openedPath != "" {
		return nil, fmt.Errorf("ggml: already opened from %s in this process; cannot also open %s (the C libraries are process-wide)", openedPath, abs)
	}
	lib, loaded, err := open(abs)
	if loaded {
		// Once ggml is in the process it stays: remember the outcome.
		openedPath, openedLib, openedErr = abs, lib, err
	}
	return lib, err
}

// open loads the libraries; loaded reports whether libggml-base.so got into
// the process (after which another folder cannot be opened).
func open(dir string) (lib *Library, loaded bool, err error) {
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() {
		return nil, false, fmt.Errorf("%w: folder %s does not exist; run `make deps` (scripts/fetch-ggml.sh) or point --ggml-dir / %s at a ggml build", ErrNotFound, dir, EnvDir)
	}
	basePath := filepath.Join(dir, "libggml-base.so")
	if _, err := os.Stat(basePath); err != nil {
		return nil, false, fmt.Errorf("%w: %s has no libggml-base.so; run `make deps` or point --ggml-dir / %s at a ggml build", ErrNotFound, dir, EnvDir)
	}
	loaderPath, err := findLoader(dir)
	if err != nil {
		return nil, false, err
	}
	base, err := purego.Dlopen(basePath, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, false, fmt.Errorf("ggml: cannot load %s: %w; run `make deps` to fetch a working build", basePath, err)
	}
	loader, err := purego.Dlopen(loaderPath, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, true, fmt.Errorf("ggml: cannot load %s: %w; run `make deps` to fetch a working build", loaderPath, err)
	}
	l := &Library{dir: dir, base: base, loader: loader, live: map[cBuffer]struct{}{}, instances: map[*backendImpl]struct{}{}}
	// The version first, so that another ggml build fails with both versions
	// named rather than with whichever symbol it happens to lack.
	for _, s := range []struct {
		fn   *func() string
		name string
	}{{&l.fn.version, "ggml_version"}, {&l.fn.commit, "ggml_commit"}} {
		addr, err := lookup(s.name, loader, base)
		if err != nil {
			return nil, true, err
		}
		purego.RegisterFunc(s.fn, addr)
	}
	l.version, l.commit = l.fn.version(), l.fn.commit()
	if err := CheckVersion(l.version, l.commit); err != nil {
		return nil, true, fmt.Errorf("%w (libraries in %s)", err, dir)
	}
	if err := l.fn.bind(loader, base); err != nil {
		return nil, true, err
	}
	l.tensorOverhead = l.fn.tensorOverhead()
	if err := l.checkLayout(); err != nil {
		return nil, true, err
	}
	if err := l.installLogger(); err != nil {
		return nil, true, err
	}
	l.fn.backendLoadAllFromPath(dir)
	if l.fn.backendDevCount() == 0 {
		return nil, true, fmt.Errorf("%w: no ggml backend loaded from %s (no libggml-cpu-*.so usable on this CPU?); run `make deps`", ErrNoBackend, dir)
	}
	return l, true, nil
}

// findLoader returns the backend loader library (libggml.v0.5.0.so in the
// CPU build, libggml.vulkan.v0.5.0.so in the Vulkan build, or plain libggml.so
// in a user's own build).
func findLoader(dir string) (string, error) {
	var found []string
	for _, pat := range []string{"libggml.*.so", "libggml.so"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		found = append(found, m...)
	}
	sort.Strings(found)
	if len(found) == 0 {
		return "", fmt.Errorf("%w: %s has no backend loader libggml*.so (libggml.v0.5.0.so or libggml.vulkan.v0.5.0.so); run `make deps`", ErrNotFound, dir)
	}
	return found[0], nil
}

// CheckVersion compares a library's ggml_version()/ggml_commit() against the
// version this binding was written for and names both when they differ.
func CheckVersion(version, commit string) error {
	if version == WantVersion && strings.HasPrefix(commit, WantCommit) {
		return nil
	}
	return fmt.Errorf("%w: the libraries are ggml %s (commit %s), this binding was written for ggml %s (commit %s); run `make deps` to fetch the matching build", ErrVersion, version, commit, WantVersion, WantCommit)
}

// checkLayout verifies the struct ggml_tensor field offsets this binding reads
// directly (type, buffer, ne, nb, src, data, name) on a scratch tensor.
func (l *Library) checkLayout() error {
	ctx := l.fn.init(initParams{memSize: 4 * l.tensorOverhead, noAlloc: true})
	if ctx == 0 {
		return errors.New("ggml: ggml_init failed for a tiny context")
	}
	defer l.fn.free(ctx)
	t := l.fn.newTensor4D(ctx, int32(TypeF32), 2, 3, 5, 7)
	ne := tensorNE(t)
	nb := tensorNB(t)
	bad := ne != [4]int64{2, 3, 5, 7} || nb != [4]uint64{4, 8, 24, 120} ||
		l.fn.getName(t) != t+offName || tensorType(t) != TypeF32 || tensorBuffer(t) != 0 || tensorData(t) != 0
	if !bad {
		s := l.fn.sub(ctx, t, t)
		bad = tensorSrc(s, 0) != t || tensorSrc(s, 1) != t || tensorSrc(s, 2) != 0
	}
	if bad {
		return fmt.Errorf("ggml: struct ggml_tensor layout in %s differs from ggml %s; run `make deps` to fetch the matching build", l.dir, WantVersion)
	}
	return nil
}

// Dir is the folder the libraries were loaded from.
func (l *Library) Dir() string { return l.dir }

// Version is the libraries' ggml_version().
func (l *Library) Version() string { return l.version }

// Commit is the libraries' ggml_commit().
func (l *Library) Commit() string { return l.commit }

func (l *Library) addLive(b cBuffer) {
	l.liveMu.Lock()
	l.live[b] = struct{}{}
	l.liveMu.Unlock()
}

func (l *Library) dropLive(b cBuffer) {
	l.liveMu.Lock()
	delete(l.live, b)
	l.liveGen++
	for inst := range l.instances {
		if _, ok := inst.used[b]; ok {
			inst.recycle = true
		}
	}
	l.liveMu.Unlock()
}

func (l *Library) generation() uint64 {
	l.liveMu.Lock()
	defer l.liveMu.Unlock()
	return l.liveGen
}

func (l *Library) isLive(b cBuffer) bool {
	l.liveMu.Lock()
	_, ok := l.live[b]
	l.liveMu.Unlock()
	return ok
}

// Offsets in struct ggml_tensor (ggml.h, linux/amd64), checked at Open.
const (
	offType     = 0
	offBuffer   = 8
	offNE       = 16
	offNB       = 48
	offOp       = 80
	offSrc      = 152
	maxSrc      = 10
	offViewSrc  = 232
	offData     = 248
	offName     = 256
	maxNameLen  = 63
	offSrcLimit = offSrc + 8*maxSrc
)

// cptr turns an address in C memory into an unsafe.Pointer without tripping
// vet's uintptr check; the memory is never Go-managed.
func cptr(h uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&h)) }

func tensorNE(t cTensor) (ne [4]int64) {
	return *(*[4]int64)(cptr(t + offNE))
}

func tensorNB(t cTensor) (nb [4]uint64) {
	return *(*[4]uint64)(cptr(t + offNB))
}

func tensorType(t cTensor) Type { return Type(*(*int32)(cptr(t + offType))) }

func tensorBuffer(t cTensor) cBuffer { return *(*uintptr)(cptr(t + offBuffer)) }

func tensorData(t cTensor) uintptr { return *(*uintptr)(cptr(t + offData)) }

func tensorSrc(t cTensor, i int) cTensor { return *(*uintptr)(cptr(t + offSrc + uintptr(8*i))) }

func tensorViewSrc(t cTensor) cTensor { return *(*uintptr)(cptr(t + offViewSrc)) }

// goString copies a NUL-terminated C string.
func goString(p uintptr) string {
	if p == 0 {
		return ""
	}
	n := 0
	for *(*byte)(cptr(p + uintptr(n))) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(cptr(p)), n))
}

// Live counts the ggml objects Go code holds open; each Close lowers its
// count. Tests use it to prove a family frees everything it made.
type Live struct {
	Contexts, Buffers, Allocators, Backends int64
}

// Live reports the objects currently open through this library.
func (l *Library) Live() Live {
	return Live{
		Contexts:   l.counts.contexts.Load(),
		Buffers:    l.counts.buffers.Load(),
		Allocators: l.counts.allocators.Load(),
		Backends:   l.counts.backends.Load(),
	}
}
