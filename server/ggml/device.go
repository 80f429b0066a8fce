package ggml

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/ebitengine/purego"
)

// Device is one compute device that a loaded ggml backend offers.
type Device struct {
	// Index is the device's position in ggml's global device list.
	Index int
	// Backend is the backend kind the device belongs to: cpu, vulkan, cuda,
	// or the lower-cased ggml registry name for others.
	Backend string
	// Ordinal is the device's number within its backend (the --device N value).
	Ordinal int
	// Name is ggml's device name (CPU, Vulkan0, CUDA0).
	Name string
	// Description is the driver's description (CPU model, GPU name).
	Description string
	// Type is cpu, gpu, igpu, accel or meta.
	Type string
	// MemoryFree and MemoryTotal are in bytes as ggml reports them.
	MemoryFree, MemoryTotal uint64

	h cDevice
}

var devTypeNames = []string{"cpu", "gpu", "igpu", "accel", "meta"}

func devTypeName(t int32) string {
	if t >= 0 && int(t) < len(devTypeNames) {
		return devTypeNames[t]
	}
	return fmt.Sprintf("type%d", t)
}

// backendKind maps a ggml registry name (CPU, Vulkan, CUDA) to the --backend value.
func backendKind(regName string) string { return strings.ToLower(regName) }

// Devices lists every device of every loaded backend, in ggml's order.
func (l *Library) Devices() []Device {
	n := int(l.fn.backendDevCount())
	out := make([]Device, 0, n)
	perKind := map[string]int{}
	for i := 0; i < n; i++ {
		d := l.fn.backendDevGet(uintptr(i))
		if d == 0 {
			continue
		}
		var free, total uintptr
		l.fn.backendDevMemory(d, &free, &total)
		kind := backendKind(l.fn.backendRegName(l.fn.backendDevBackendReg(d)))
		out = append(out, Device{
			Index:       i,
			Backend:     kind,
			Ordinal:     perKind[kind],
			Name:        l.fn.backendDevName(d),
			Description: l.fn.backendDevDescription(d),
			Type:        devTypeName(l.fn.backendDevType(d)),
			MemoryFree:  uint64(free),
			MemoryTotal: uint64(total),
			h:           d,
		})
		perKind[kind]++
	}
	return out
}

// DeviceTable prints the devices (backend, device number, name, description,
// type, memory) as an aligned table, for --list-devices.
func (l *Library) DeviceTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "BACKEND\tDEVICE\tNAME\tDESCRIPTION\tTYPE\tMEMORY FREE\tMEMORY TOTAL\n")
	for _, d := range l.Devices() {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", d.Backend, d.Ordinal, d.Name, d.Description, d.Type,
			formatBytes(d.MemoryFree), formatBytes(d.MemoryTotal))
	}
	return tw.Flush()
}

func formatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// Backends lists the backend kinds that have at least one device, for error
// messages and flag help.
func (l *Library) Backends() []string {
	var kinds []string
	seen := map[string]bool{}
	for _, d := range l.Devices() {
		if !seen[d.Backend] {
			seen[d.Backend] = true
			kinds = append(kinds, d.Backend)
		}
	}
	return kinds
}

// Backend is one selected ggml compute backend (CPU, Vulkan or CUDA device)
// shared by every model family for the lifetime of the server. Compute calls
// on one Backend are serialised; a session that wants to compute in parallel
// with others takes its own stream with Fork.
type Backend struct {
	impl *backendImpl
}

type backendImpl struct {
	lib     *Library
	dev     Device
	threads int

	// mu guards h and closed, and serialises Compute (a ggml backend
	// instance is not safe for concurrent graph computation).
	mu        sync.Mutex
	h         cBackend
	closed    bool
	setThread func(b cBackend, n int32)

	// Vulkan only, guarded by lib.liveMu: the buffers this instance has
	// computed with, and whether one of them was freed since. ggml-vulkan
	// keeps descriptor sets that point at every buffer a graph used;
	// updating them after such a buffer is freed corrupted the heap under
	// lavapipe (seen with ggml 0.25.1, Mesa 22.3). An instance that used a
	// freed buffer is replaced by a fresh one before its next Compute.
	used    map[cBuffer]struct{}
	recycle bool
}

// NewBackend initialises device number device of the backend kind (cpu,
// vulkan, cuda). threads applies to the CPU backend (0 = all cores). An absent
// backend or device is an ErrNoBackend error naming what is available.
func (l *Library) NewBackend(kind string, device, threads int) (*Backend, error) {
	kind = strings.ToLower(strings.TrimSpace(kind))
	if kind == "" {
		kind = "cpu"
	}
	devs := l.Devices()
	var match []Device
	for _, d := range devs {
		if d.Backend == kind {
			match = append(match, d)
		}
	}
	if len(match) == 0 {
		hint := ""
		switch kind {
		case "vulkan":
			hint = "; the Vulkan build is in .deps/ggml/vulkan (`make deps`), it needs libvulkan1 and mesa-vulkan-drivers (lavapipe) without a GPU"
		case "cuda":
			hint = "; point --ggml-dir at a CUDA build of ggml " + WantVersion + " on a machine with an NVIDIA GPU"
		}
		return nil, fmt.Errorf("%w: no %q backend in %s (available: %s)%s", ErrNoBackend, kind, l.dir, availableList(devs), hint)
	}
	if device < 0 || device >= len(match) {
		return nil, fmt.Errorf("%w: %s has %d device(s), numbered 0..%d; --device %d does not exist (available: %s)", ErrNoBackend, kind, len(match), len(match)-1, device, availableList(devs))
	}
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	impl := &backendImpl{lib: l, dev: match[device], threads: threads}
	if addr := l.fn.backendRegGetProcAddress(l.fn.backendDevBackendReg(impl.dev.h), "ggml_backend_set_n_threads"); addr != 0 {
		// void ggml_backend_cpu_set_n_threads(ggml_backend_t backend_cpu, int n_threads);
		purego.RegisterFunc(&impl.setThread, addr)
	}
	h, err := impl.initStream()
	if err != nil {
		return nil, err
	}
	impl.h = h
	l.counts.backends.Add(1)
	l.trackInstance(impl)
	return &Backend{impl: impl}, nil
}

func availableList(devs []Device) string {
	if len(devs) == 0 {
		return "none"
	}
	parts := make([]string, len(devs))
	for i, d := range devs {
		parts[i] = fmt.Sprintf("%s device %d (%s, %s)", d.Backend, d.Ordinal, d.Name, d.Description)
	}
	return strings.Join(parts, "; ")
}

func (b *backendImpl) initStream() (cBackend, error) {
	h := b.lib.fn.backendDevInit(b.dev.h, nil)
	if h == 0 {
		return 0, fmt.Errorf("%w: ggml could not initialise %s device %d (%s)", ErrNoBackend, b.dev.Backend, b.dev.Ordinal, b.dev.Name)
	}
	if b.setThread != nil {
		b.setThread(h, int32(b.threads))
	}
	return h, nil
}

func (b *Backend) get() (*backendImpl, error) {
	if b == nil || b.impl == nil {
		return nil, fmt.Errorf("%w: nil ggml backend", ErrClosed)
	}
	return b.impl, nil
}

// Fork returns a new, independently closable stream on the same device with
// the same thread count. Buffers allocated through either work with both, so
// sessions share weights and compute in parallel on their own stream.
func (b *Backend) Fork() (*Backend, error) {
	impl, err := b.get()
	if err != nil {
		return nil, err
	}
	impl.mu.Lock()
	closed := impl.closed
	impl.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("%w: backend %s", ErrClosed, impl.dev.Name)
	}
	n := &backendImpl{lib: impl.lib, dev: impl.dev, threads: impl.threads, setThread: impl.setThread}
	h, err := n.initStream()
	if err != nil {
		return nil, err
	}
	n.h = h
	impl.lib.counts.backends.Add(1)
	impl.lib.trackInstance(n)
	return &Backend{impl: n}, nil
}

// Close frees the backend stream. It is idempotent; buffers allocated through
// it stay valid (they belong to the device) and must be closed by their owner.
func (b *Backend) Close() error {
	if b == nil || b.impl == nil {
		return nil
	}
	impl := b.impl
	impl.mu.Lock()
	defer impl.mu.Unlock()
	if impl.closed {
		return nil
	}
	impl.closed = true
	impl.lib.untrackInstance(impl)
	impl.lib.fn.backendFree(impl.h)
	impl.lib.counts.backends.Add(-1)
	impl.h = 0
	return nil
}

// Library is the library the backend came from.
func (b *Backend) Library() *Library { return b.impl.lib }

// Kind is cpu, vulkan or cuda.
func (b *Backend) Kind() string { return b.impl.dev.Backend }

// Device describes the backend's device.
func (b *Backend) Device() Device { return b.impl.dev }

// Threads is the CPU thread count (meaningful for the CPU backend).
func (b *Backend) Threads() int { return b.impl.threads }

// String names the backend, e.g. "vulkan device 0 (Vulkan0: llvmpipe ...)".
func (b *Backend) String() string {
	if b == nil || b.impl == nil {
		return "<nil backend>"
	}
	d := b.impl.dev
	return fmt.Sprintf("%s device %d (%s: %s)", d.Backend, d.Ordinal, d.Name, d.Description)
}

// SetThreads changes the CPU thread count; other backends ignore it.
func (b *Backend) SetThreads(n int) error {
	impl, err := b.get()
	if err != nil {
		return err
	}
	if n <= 0 {
		n = runtime.NumCPU()
	}
	impl.mu.Lock()
	defer impl.mu.Unlock()
	if impl.closed {
		return fmt.Errorf("%w: backend %s", ErrClosed, impl.dev.Name)
	}
	impl.threads = n
	if impl.setThread != nil {
		impl.setThread(impl.h, int32(n))
	}
	return nil
}

// Synchronize waits for the backend's queued work. Compute already waits, so
// this is only needed around asynchronous use.
func (b *Backend) Synchronize() error {
	impl, err := b.get()
	if err != nil {
		return err
	}
	impl.mu.Lock()
	defer impl.mu.Unlock()
	if impl.closed {
		return fmt.Errorf("%w: backend %s", ErrClosed, impl.dev.Name)
	}
	impl.lib.fn.backendSynchronize(impl.h)
	return nil
}

// tracksBuffers reports whether the instance needs replacing after a buffer
// it used is freed (see backendImpl.used).
func (b *backendImpl) tracksBuffers() bool { return b.dev.Backend == "vulkan" }

func (l *Library) trackInstance(b *backendImpl) {
	if !b.tracksBuffers() {
		return
	}
	l.liveMu.Lock()
	b.used = map[cBuffer]struct{}{}
	l.instances[b] = struct{}{}
	l.liveMu.Unlock()
}

func (l *Library) untrackInstance(b *backendImpl) {
	l.liveMu.Lock()
	delete(l.instances, b)
	l.liveMu.Unlock()
}

// noteUsed records the buffers a graph computed on b uses.
func (l *Library) noteUsed(b *backendImpl, bufs map[cBuffer]struct{}) {
	if !b.tracksBuffers() {
		return
	}
	l.liveMu.Lock()
	for buf := range bufs {
		b.used[buf] = struct{}{}
	}
	l.liveMu.Unlock()
}

// refreshLocked replaces the instance's ggml backend with a fresh one if a
// buffer it used was freed. The caller holds b.mu.
func (b *backendImpl) refreshLocked() error {
	if !b.tracksBuffers() {
		return nil
	}
	b.lib.liveMu.Lock()
	need := b.recycle
	b.recycle = false
	if need {
		clear(b.used)
		b.lib.recycles++
	}
	b.lib.liveMu.Unlock()
	if !need {
		return nil
	}
	b.lib.fn.backendFree(b.h)
	h, err := b.initStream()
	if err != nil {
		b.h = 0
		b.closed = true
		b.lib.untrackInstance(b)
		b.lib.counts.backends.Add(-1)
		return fmt.Errorf("ggml: replacing the %s stream after a buffer was freed: %w", b.dev.Name, err)
	}
	b.h = h
	return nil
}
