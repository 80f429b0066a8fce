// Package runtimetest holds test helpers shared by the runtime
// implementations' test suites (runtimes/legacy and runtimes/parallel), so
// the memory-guard tests of both drive their runtimes the same way.
package runtimetest

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// MemProbe is an injected free-memory figure that tests change at will. Its
// Read method fits runtimes.Options.FreeMemory; Calls counts how often the
// runtime under test asked.
type MemProbe struct {
	// Free is the figure Read reports, in bytes.
	Free atomic.Uint64
	// Calls is the number of times Read has been called.
	Calls atomic.Int64
}

// NewMemProbe returns a probe that reports free bytes until told otherwise.
func NewMemProbe(free uint64) *MemProbe {
	p := &MemProbe{}
	p.Free.Store(free)
	return p
}

// Read counts the call and reports the current free figure; it never fails.
func (p *MemProbe) Read() (uint64, error) {
	p.Calls.Add(1)
	return p.Free.Load(), nil
}

// SparseFile makes a file of size bytes at path, creating its parent
// folders; the file is sparse, so big ones cost no disk. It fails the test
// on any error.
func SparseFile(t testing.TB, path string, size int64) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
